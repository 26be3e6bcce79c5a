"""The parent's handle on one zygote process: started from a thread that lives as long as its sandbox,
waited for ("ready") holding only its own lock, and stopped without waiting behind a thread that waits
for it. The sandbox (supervisor.py) keeps one current handle and replaces it when its zygote dies."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

from docfence.sandbox import launch, protocol

log = logging.getLogger("docfence.sandbox")

START_TIMEOUT_S = 300.0  # imports + warm-up on a loaded machine; a hang here is a broken install
KILL_GRACE_S = 30.0  # after a kill request, how long the zygote has to report the exit
STOP_GRACE_S = 5.0  # after SIGTERM to an idle zygote (it stops at its next checkpoint; one stuck in a
#                     C call is then killed)


class SandboxUnavailable(RuntimeError):
    """The zygote could not be started."""


class Owner:
    """The one thread that starts a sandbox's zygotes. PR_SET_PDEATHSIG fires when the *thread* that
    forked a process ends, not its process: a zygote restarted from a short-lived thread (a request
    handler's, a dispatcher's) would be SIGKILLed when that thread ended, with every task it ran. This
    thread lives as long as its sandbox object (an idle executor thread; it ends when the sandbox is
    collected or the interpreter exits, and its zygote with it)."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def spawn(self, profile: str) -> Handle:
        """A zygote of `profile` started from the owner thread. Raises SandboxUnavailable when no
        process can be started."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docfence-zygote-owner")
            pool = self._pool
        try:
            proc, control = pool.submit(launch.spawn_zygote, profile).result()
        except OSError as exc:
            raise SandboxUnavailable(f"the sandbox zygote could not be started ({exc.strerror})") from exc
        except RuntimeError as exc:  # the interpreter is exiting: no new thread work is accepted
            raise SandboxUnavailable("the sandbox zygote could not be started (shutting down)") from exc
        return Handle(proc, control)


class Handle:
    """One zygote: its process, our end of its control socket, whether it said "ready"."""

    def __init__(self, proc: subprocess.Popen[bytes], control: socket.socket) -> None:
        self.proc, self.control = proc, control
        self.ready = False
        self.failed = False  # did not start, or stopped: never handed a task again
        self._reading = threading.Lock()  # held by the one thread reading "ready", never by a stop

    @property
    def pid(self) -> int:
        return self.proc.pid

    def usable(self) -> bool:
        return not self.failed and self.proc.poll() is None

    def await_ready(self) -> None:
        """Until the zygote says it is ready; raises SandboxUnavailable when it does not within
        START_TIMEOUT_S, dies, or is stopped meanwhile (stop() wakes this wait at once)."""
        with self._reading:
            if self.ready:
                return
            if self.failed:
                raise SandboxUnavailable("the sandbox zygote was stopped")
            message = None
            with contextlib.suppress(OSError, ValueError), selectors.DefaultSelector() as sel:
                sel.register(self.control, selectors.EVENT_READ)
                if sel.select(START_TIMEOUT_S):
                    message = protocol.receive(self.control)[0]
            if message is None or "ready" not in message:
                self.failed = True
                raise SandboxUnavailable("the sandbox zygote did not start")
            self.ready = True
        log.info("sandbox zygote ready (pid %s)", self.proc.pid)

    def stop(self, *, busy: bool) -> None:
        """End the zygote. Its control socket is shut (end of stream: it kills its render processes and
        exits; a thread waiting for its "ready" wakes). When nothing of ours runs in it (`busy` false, or
        never ready) it also gets SIGTERM, so a warm-up stops at its next checkpoint instead of finishing;
        SIGKILL after the grace."""
        self.failed = True
        with contextlib.suppress(OSError):
            self.control.shutdown(socket.SHUT_RDWR)
        grace = KILL_GRACE_S
        if not self.ready or not busy:
            self.proc.terminate()
            grace = STOP_GRACE_S
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with self._reading:  # the woken reader is done with the socket
            self.control.close()


__all__ = ["KILL_GRACE_S", "START_TIMEOUT_S", "STOP_GRACE_S", "Handle", "Owner", "SandboxUnavailable"]
