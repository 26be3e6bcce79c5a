"""What a render process inherits from its zygote: only its task's descriptors (stdin, stdout and stderr
on /dev/null), a file-size limit sized by its job, and a process group of its own that the zygote, its
subreaper, kills when it ends, so no process it starts outlives it."""

from __future__ import annotations

import contextlib
import os
import resource
import signal

from docfence.sandbox.protocol import libc

_PR_SET_CHILD_SUBREAPER = 36
_MAX_FD = 0x7FFF_FFFF  # os.closerange is one close_range(2) call on Linux, whatever the bound
FSIZE_FLOOR_BYTES = 16 * 1024 * 1024  # answer file, lock file, a second reader's copies of a tiny job


def keep_only(keep: set[int], devnull: int) -> None:
    """Point 0, 1 and 2 at `devnull` (the worker's log and terminal are out of reach: a render
    traceback travels in the answer, outcomes.from_exception) and close every other descriptor but
    `keep`: the zygote's epoll and wake-up pipe, its control socket, other tasks' sockets, files."""
    for std in (0, 1, 2):
        os.dup2(devnull, std)
    low = 3
    for fd in sorted(fd for fd in keep if fd >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _MAX_FD)


def file_size_limit(input_bytes: int, max_output_bytes: int) -> int:
    """The largest file a job may write: its output (at most max_output_bytes, which the engines enforce
    after rendering) or a copy of it or of its input (a repair), with a floor for small jobs."""
    return max(max_output_bytes, 2 * input_bytes) + FSIZE_FLOOR_BYTES


def limit_file_size(limit: int) -> None:
    """RLIMIT_FSIZE at `limit`; SIGXFSZ ignored, so a write past it fails with EFBIG (an OSError the
    task answers as a coded outcome) instead of killing the process without an answer."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def own_group(pid: int = 0) -> None:
    """Make `pid` (0: this process) the leader of a process group of its own. Called by both sides of the
    fork, so the group exists before either goes on (the zygote may kill it at once)."""
    with contextlib.suppress(PermissionError, ProcessLookupError):  # the other side got there first
        os.setpgid(pid, 0)


def become_subreaper() -> None:
    """This process adopts its descendants' orphans (PR_SET_CHILD_SUBREAPER): a render process's child
    whose parent died comes back to the zygote, which reaps it, instead of living on under init."""
    if libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_CHILD_SUBREAPER) failed")


def kill_group(pid: int) -> None:
    """SIGKILL every process still in render process `pid`'s group (its leader ended or is ending). The
    group id cannot be reused while any member lives, so this never reaches another process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
