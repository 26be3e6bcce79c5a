"""The parent's side of the sandbox: starts (and restarts) the zygote, hands it tasks, enforces each
task's wall-clock budget, cancels on request, and turns every ending into an Outcome (outcomes.py).

Thread-safe: many threads may run tasks at once (one render process each). The parent is the only
side that holds leases or talks to the store; `heartbeat` is called while a task runs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import secrets
import selectors
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docfence.core.clock import monotonic
from docfence.core.policy import JobPolicy, Mode
from docfence.sandbox import protocol
from docfence.sandbox.confine import available
from docfence.sandbox.inherit import file_size_limit
from docfence.sandbox.outcomes import Outcome, from_answer, from_exit, from_fork_failure
from docfence.sandbox.work import KINDS
from docfence.sandbox.zygotes import KILL_GRACE_S, Handle, Owner, SandboxUnavailable

log = logging.getLogger("docfence.sandbox")

@dataclass(frozen=True)
class Task:
    kind: str  # watermark | report | provider_check | sign
    input_path: Path
    output_path: Path
    policy: JobPolicy
    password: str | None = field(default=None, repr=False)  # never in a log line or a traceback
    fsync: bool = False  # the output is published from this file as is (the CLI)
    # the organisation's signing key (engines.signing.SigningKey.to_request()) for classes that sign
    signing: dict[str, Any] | None = field(default=None, repr=False)
    # what the sandbox's own log lines about this task carry (the worker's {"job_id", "attempt"})
    log_context: Mapping[str, object] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.signing is not None and self.kind != "sign":  # untrusted input never meets the key
            raise ValueError("only a sign task carries the signing key")
        if self.kind not in KINDS:
            raise ValueError(f"unknown sandbox task kind {self.kind!r}")


def _raster_dpi(task: Task) -> int | None:
    """The DPI a raster watermark job draws its pages at (its budget grows with it), else None."""
    policy = task.policy
    return policy.dpi if task.kind == "watermark" and Mode(policy.mode) is Mode.RASTER else None


def _secrets_pipe(task: Task) -> int | None:
    """The read end of a pipe holding the task's password and signing key, for its render process
    alone; None when it has neither. The zygote passes the descriptor on unread: a secret in its
    memory would be in every later render process forked from it."""
    given = {"password": task.password, "signing": task.signing}
    return protocol.secrets_pipe(given) if any(given.values()) else None


PROFILES = ("all", "watermark", "report", "sign")  # what the zygote imports and warms (zygote.py)


class Sandbox:
    def __init__(self, profile: str = "all") -> None:
        """`profile`: "watermark" leaves the report engine (weasyprint, +28 MB) out of the zygote, so
        each fork and exit copies and tears down fewer page tables; "report" warms it before the first
        task; "all" (default) warms both. These profiles run any kind but "sign", a missing import
        costing that one task its time."""
        if profile not in PROFILES:
            raise ValueError(f"unknown sandbox profile {profile!r}")
        self.profile = profile
        # guards the fields below; never held while waiting for a zygote (Handle.await_ready) or for
        # one to exit (Handle.stop), so kill() and close() never wait behind a zygote warming up
        self._lock = threading.Lock()
        self._zygote: Handle | None = None
        self._owner = Owner()  # the long-lived thread every zygote of this sandbox is started from
        self._running = 0  # tasks handed over and not yet answered (run() calls in progress)
        self.starts = 0  # how many zygotes this sandbox started (1 + restarts)

    @property
    def zygote_pid(self) -> int | None:
        zygote = self._zygote
        return zygote.pid if zygote is not None else None

    def start(self, *, wait: bool = True) -> None:
        """Start the zygote (the first task would). `wait=False` returns at once: the worker claims
        while it warms up, and its first task waits for it to be ready. Raises SandboxUnavailable."""
        zygote = self._current()
        if wait:
            zygote.await_ready()
        _warn_if_unconfined()

    def close(self) -> None:
        """Stop the zygote; it kills any render process still running."""
        with self._lock:
            zygote, self._zygote = self._zygote, None
            busy = self._running > 0
        if zygote is not None:
            zygote.stop(busy=busy)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def run(self, task: Task, *, cancel: Callable[[], bool] | None = None,
            heartbeat: Callable[[], object] | None = None, heartbeat_interval_s: float = 5.0) -> Outcome:
        """Run `task` in a fresh render process. `cancel()` true: kill it, outcome `canceled`.
        `heartbeat()` is called every interval while it runs; what it raises kills the task and
        propagates (e.g. LeaseLost). Never raises for anything the render process does; an unexpected
        exception in it is logged here at ERROR with its traceback (task.log_context) and is
        engine_error in the outcome, whose message names only its error id."""
        if (task.kind == "sign") != (self.profile == "sign"):  # the key's zygote forks no untrusted work
            raise ValueError(f"a {task.kind} task cannot run in the {self.profile!r} sandbox: "
                             "sign tasks run only in Sandbox('sign'), and it runs nothing else")
        answer = Path(f"{task.output_path}.answer")
        answer.unlink(missing_ok=True)
        token = secrets.token_hex(8)
        secret: int | None = None
        ours: socket.socket | None = None
        with self._lock:
            self._running += 1
        try:
            secret = _secrets_pipe(task)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with theirs:
                handed = self._hand_over(token, theirs, task, answer, secret)
            if secret is not None:  # the zygote holds its own copy now (or none: never handed over)
                os.close(secret)
                secret = None
            if not handed:
                return from_exit(None, killed_for=None)
            outcome = _Watch(self, ours, token, task, answer, cancel, heartbeat, heartbeat_interval_s).wait()
            _log_unexpected(task, outcome)
            return outcome
        finally:
            with self._lock:
                self._running -= 1
            if ours is not None:
                ours.close()
            answer.unlink(missing_ok=True)
            if secret is not None:
                os.close(secret)

    def _hand_over(self, token: str, theirs: socket.socket, task: Task, answer: Path,
                   secret: int | None) -> bool:
        message = {"op": "run", "token": token, "request": _request(task, answer)}
        fds = [theirs.fileno(), *([secret] if secret is not None else [])]
        for _ in range(2):  # a zygote that died since the last task is restarted once
            try:
                zygote = self._current()
                zygote.await_ready()  # without the sandbox's lock: kill() and close() go on meanwhile
            except SandboxUnavailable:
                if self._zygote is not None:  # else closed while it warmed up: nothing to report
                    log.exception("the sandbox zygote could not start")
                return False
            with self._lock:
                if self._zygote is not zygote:  # closed or replaced while it warmed up
                    continue
                try:
                    protocol.send(zygote.control, message, fds)
                    return True
                except OSError:
                    log.warning("the sandbox zygote is gone; restarting it")
                    zygote.failed = True
        return False

    def kill(self, token: str) -> None:
        with self._lock:
            if self._zygote is not None:
                with contextlib.suppress(OSError):
                    protocol.send(self._zygote.control, {"op": "kill", "token": token})

    def _current(self) -> Handle:
        """The zygote to hand tasks to: the current one while it lives, else a new one started from the
        owner thread (a dead one is stopped outside the lock). Raises SandboxUnavailable."""
        with self._lock:
            old = self._zygote
            if old is not None and old.usable():
                return old
            self._zygote = self._owner.spawn(self.profile)  # a fork and an exec: no wait for "ready"
            self.starts += 1
            current = self._zygote
        if old is not None:
            old.stop(busy=False)  # dead, or never ready: nothing of ours runs in it
        return current

    @classmethod
    def adopting(cls, profile: str, started: tuple[subprocess.Popen[bytes], socket.socket]) -> Sandbox:
        """A sandbox whose first zygote is one launch.spawn_zygote(profile) already started (the CLI
        starts it before importing this module, from its main thread); a restart later is started from
        the sandbox's owner thread, as ever."""
        sandbox = cls(profile)
        with sandbox._lock:
            sandbox._zygote = Handle(*started)
            sandbox.starts += 1
        return sandbox


def _request(task: Task, answer: Path) -> dict[str, Any]:
    """What the zygote is told about `task`: no secret in it (the zygote parses it; see _secrets_pipe)."""
    limits = task.policy.limits
    size = task.input_path.stat().st_size if task.input_path.exists() else 0
    return {
        "kind": task.kind, "input": str(task.input_path), "output": str(task.output_path),
        "answer": str(answer), "policy": task.policy.to_dict(),
        "fsync": task.fsync, "memory_mb": limits.render_memory_mb,
        "fsize_bytes": file_size_limit(size, limits.max_output_bytes),
        "cpu_s": int(limits.render_budget_s(input_bytes=size, pages=limits.max_pages,
                                            raster_dpi=_raster_dpi(task))) + 1,
    }


def _log_unexpected(task: Task, outcome: Outcome) -> None:
    """An unexpected exception in the render process: its traceback in this process's log at ERROR,
    under the error id its public message names (the message never holds the traceback)."""
    if outcome.trace is None:
        return
    extra = {**(task.log_context or {}), "error_id": outcome.error_id}
    log.error("render process: unexpected exception (error id %s, %s)\n%s", outcome.error_id,
              outcome.error_code, outcome.trace.rstrip(), extra=extra)


class _Watch:
    """Waits on one task's socket: pid, page count (extends the budget), answer or exit."""

    def __init__(self, sandbox: Sandbox, sock: socket.socket, token: str, task: Task, answer: Path,
                 cancel: Callable[[], bool] | None, heartbeat: Callable[[], object] | None,
                 heartbeat_interval_s: float) -> None:
        self.sandbox, self.sock, self.token, self.task, self.answer = sandbox, sock, token, task, answer
        self.cancel, self.heartbeat, self.interval = cancel, heartbeat, heartbeat_interval_s
        self.size = task.input_path.stat().st_size if task.input_path.exists() else 0
        self.started = monotonic()
        self.deadline = self.started + task.policy.limits.render_budget_s(
            input_bytes=self.size, raster_dpi=_raster_dpi(task))
        self.killed_for: str | None = None
        self.killed_at = 0.0
        self.next_beat = self.started + heartbeat_interval_s

    def wait(self) -> Outcome:
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ)
        try:
            while True:
                if sel.select(self._timeout()):
                    outcome = self._receive()
                    if outcome is not None:
                        return outcome
                self._check_time()
        except BaseException:
            self.sandbox.kill(self.token)  # e.g. LeaseLost from the heartbeat: the work is void
            raise
        finally:
            sel.close()

    def _receive(self) -> Outcome | None:
        """The next message's outcome, if it ends the task. What is not a message of ours (a render
        process a document took over may write anything to its socket) is ignored: the budget runs on."""
        try:
            message, fds = protocol.receive(self.sock)
            for fd in fds:
                os.close(fd)
            return self._on_message(message)
        except (ValueError, TypeError, KeyError):
            return None

    def _timeout(self) -> float:
        now = monotonic()
        ends = [self.deadline, self.next_beat] if self.heartbeat else [self.deadline]
        if self.killed_for is not None:
            ends = [self.killed_at + KILL_GRACE_S]
        wait = max(0.0, min(ends) - now)
        return min(wait, 0.05) if self.cancel is not None else wait  # cancel() is polled

    def _on_message(self, message: dict[str, object] | None) -> Outcome | None:
        if message is None:  # the zygote died with the task (its children die with it)
            return from_exit(None, killed_for=self.killed_for)
        if "pages" in message and self.killed_for is None:
            pages = int(message["pages"])  # type: ignore[call-overload]
            limits = self.task.policy.limits
            self.deadline = self.started + limits.render_budget_s(
                input_bytes=self.size, pages=pages, raster_dpi=_raster_dpi(self.task))
        elif "answered" in message:
            if self.killed_for is not None:  # the kill was decided: an answer read since is void
                return from_exit(None, killed_for=self.killed_for)
            try:
                return from_answer(json.loads(self.answer.read_text("utf-8")))
            except (OSError, ValueError, TypeError):
                return from_exit(None, killed_for=self.killed_for)
        elif "fork_failed" in message:
            return from_fork_failure(int(message["fork_failed"]))  # type: ignore[call-overload]
        elif "exit" in message:
            return from_exit(int(message["exit"]), killed_for=self.killed_for)  # type: ignore[call-overload]
        return None

    def _check_time(self) -> None:
        now = monotonic()
        if self.killed_for is not None:
            if now > self.killed_at + KILL_GRACE_S:
                raise SandboxUnavailable("the zygote did not report a killed render process")
            return
        if self.cancel is not None and self.cancel():
            self._kill("canceled")
        elif now >= self.deadline:
            self._kill("wall_clock")
        elif self.heartbeat is not None and now >= self.next_beat:
            self.next_beat = now + self.interval
            self.heartbeat()

    def _kill(self, why: str) -> None:
        self.killed_for, self.killed_at = why, monotonic()
        self.sandbox.kill(self.token)


@functools.cache
def _warn_if_unconfined() -> None:
    """Once per process: say so when this machine cannot confine render processes (confine.py)."""
    can = available()
    if can["landlock"] == 0:
        log.warning("this kernel has no Landlock: render processes run unconfined (they can read what "
                    "this user can read); see docs/security.md")
    elif can["landlock"] < 6:
        log.warning("Landlock ABI %d: render processes are confined to their files%s, but may signal "
                    "other processes; Linux 6.12+ confines those too", can["landlock"],
                    "" if can["landlock"] >= 4 else " (not from TCP connections)")
    if not can["sockets"]:
        log.warning("no libseccomp: render processes may create sockets (UDP, Unix); install libseccomp2")
