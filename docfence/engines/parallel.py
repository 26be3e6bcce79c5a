"""Run independent pieces of validation in forked processes (copy-on-write: the opened documents are not
re-read), the calling process taking the last piece; page ranges are split evenly. The one place
validation goes parallel: swap it for a pool here.

A forked part that dies or answers nothing is reported as `None` for its range: the caller fails closed.
Forked parts get a parent-death signal, so none outlives a killed caller."""

from __future__ import annotations

import ctypes
import functools
import os
import pickle
import signal
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
_PR_SET_PDEATHSIG = 1


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def split(count: int, parts: int) -> list[tuple[int, int]]:
    """[first, stop) ranges covering 0..count in `parts` near-equal pieces (fewer when count is small)."""
    parts = max(1, min(parts, count))
    bounds = [round(count * k / parts) for k in range(parts + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(parts) if bounds[k] < bounds[k + 1]]


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the part still ends with its (short) work
        pass


def _child(task: Callable[[], T], write_fd: int) -> None:
    code = 1
    try:
        _die_with_parent()
        payload = pickle.dumps(task())
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(payload)
        code = 0
    finally:
        os._exit(code)


class Forked(Generic[T]):
    """One task started now in a forked child, running while the caller works; `result()` waits for
    it and is its value, or None when the child died or answered nothing (the caller fails closed)."""

    def __init__(self, task: Callable[[], T]) -> None:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            _child(task, write_fd)
        os.close(write_fd)
        self.pid, self.read_fd = pid, read_fd

    def result(self) -> T | None:
        with os.fdopen(self.read_fd, "rb") as pipe:
            payload = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        ok = os.waitstatus_to_exitcode(status) == 0 and payload
        return pickle.loads(payload) if ok else None


def run_parallel(tasks: list[Callable[[], T]]) -> list[T | None]:
    """Each task's result, in order; all but the last run in forked children at the same time."""
    if len(tasks) <= 1 or not hasattr(os, "fork"):
        return [task() for task in tasks]
    children = [Forked(task) for task in tasks[:-1]]
    own = tasks[-1]()
    return [*(child.result() for child in children), own]


def map_ranges(fn: Callable[[int, int], T], ranges: list[tuple[int, int]]) -> list[T | None]:
    """fn(first, stop) for each range, in parallel (see run_parallel)."""
    return run_parallel([functools.partial(fn, first, stop) for first, stop in ranges])


__all__ = ["Forked", "map_ranges", "run_parallel", "split", "usable_cores"]
