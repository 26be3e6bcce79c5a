"""What a render process's own failures become, and the parent's side of the sandbox under threads: an
unexpected exception is engine_error with its traceback in the parent's log (never in the public
message), an answer read after a kill decision is never a success, a refused fork is a retryable
answer, descriptors crossing the sockets never leak, no thread waits behind a zygote warming up, and a
zygote restarted from a short-lived thread outlives it. Hang guards only, never a timing assertion."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from docfence.core.policy import JobPolicy, Limits
from docfence.samples import pdfs
from docfence.sandbox import Outcome, Sandbox, Task, protocol, supervisor
from docfence.sandbox.outcomes import from_answer, from_fork_failure
from docfence.testing.procs import wait_for

HANG_GUARD_S = 120
LONG = JobPolicy(limits=Limits(render_base_s=600.0, render_timeout_s=600.0))


def _input(tmp_path: Path) -> Path:
    path = tmp_path / "in.pdf"
    path.write_bytes(pdfs.links())
    return path


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_an_unexpected_exception_in_a_task_is_engine_error_logged_with_its_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("DOCFENCE_FAULTS", "render=fail")  # InjectedFault: not a coded error of ours
    monkeypatch.setenv("DOCFENCE_FAULTS_DIR", str(tmp_path))
    task = Task("watermark", _input(tmp_path), tmp_path / "o.pdf", LONG,
                log_context={"job_id": "job_1", "attempt": 2})
    with caplog.at_level(logging.ERROR, logger="docfence.sandbox"), Sandbox("watermark") as box:
        outcome = box.run(task)
    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, "engine_error", False)
    assert outcome.error_id and f"error id {outcome.error_id}" in (outcome.error_message or "")
    assert "Traceback" not in (outcome.error_message or "")
    assert "InjectedFault" not in (outcome.error_message or "")  # the public message names no cause
    logged = [r for r in caplog.records if getattr(r, "error_id", None) == outcome.error_id]
    assert len(logged) == 1 and logged[0].levelno == logging.ERROR
    record = logged[0]
    assert (getattr(record, "job_id", None), getattr(record, "attempt", None)) == ("job_1", 2)
    assert "Traceback" in record.getMessage() and "InjectedFault" in record.getMessage()


def test_an_exception_around_the_task_is_answered_as_engine_error_not_a_crash(tmp_path: Path) -> None:
    """docfence's own code in the render process, outside the task (here: a request without its
    limits), answers engine_error with its traceback instead of exiting 70 (render_crashed, retried)."""
    from docfence.sandbox.launch import spawn_zygote
    from docfence.sandbox.zygotes import Handle

    zygote = Handle(*spawn_zygote("watermark", command_line="ascii"))
    try:
        zygote.await_ready()
        answer = tmp_path / "answer.json"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            protocol.send(zygote.control, {"op": "run", "token": "t", "request": {"answer": str(answer)}},
                          [theirs.fileno()])
        seen: list[dict[str, object]] = []
        with ours:
            while (message := protocol.receive(ours)[0]) is not None:
                seen.append(message)
    finally:
        zygote.stop(busy=False)
    keys = [sorted(m) for m in seen]
    assert sorted(keys) == [["answered"], ["exit"], ["pid"]] and keys[-1] == ["exit"], seen
    assert os.waitstatus_to_exitcode(int(seen[-1]["exit"])) == 0  # type: ignore[call-overload]
    outcome = from_answer(json.loads(answer.read_text()))
    assert (outcome.error_code, outcome.retryable) == ("engine_error", False)
    assert outcome.trace is not None and "KeyError: 'memory_mb'" in outcome.trace
    assert "memory_mb" not in (outcome.error_message or "")


class _LateAnswer:
    """A sandbox whose render process answers "ok" just as it is killed: the answer is already in the
    socket when the parent reads it, after its kill decision."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.kills = sock, 0

    def kill(self, token: str) -> None:
        self.kills += 1
        protocol.send(self.sock, {"answered": True})
        protocol.send(self.sock, {"exit": 0})


@pytest.mark.parametrize(("killed_for", "expected"), [("wall_clock", "render_resource_exceeded"),
                                                      ("canceled", "canceled")])
def test_an_answer_read_after_the_kill_decision_is_never_a_success(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, killed_for: str, expected: str) -> None:
    answer = tmp_path / "o.pdf.answer"
    answer.write_text(json.dumps(Outcome(True, pages=1).to_message()))  # a good answer, as it would be
    now = [0.0]
    monkeypatch.setattr(supervisor, "monotonic", lambda: now[0])
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fake = _LateAnswer(theirs)
    task = Task("watermark", _input(tmp_path), tmp_path / "o.pdf", LONG)
    cancel = (lambda: True) if killed_for == "canceled" else None
    watch = supervisor._Watch(fake, ours, "t", task, answer, cancel, None, 5.0)  # type: ignore[arg-type]
    now[0] = 10_000.0  # past any budget: the next look at the clock decides the kill
    with ours, theirs:
        outcome = watch.wait()
    assert fake.kills == 1 and not outcome.ok
    assert outcome.error_code == expected and outcome.canceled == (killed_for == "canceled")


def test_a_fork_the_kernel_refuses_is_a_retryable_answer_and_the_zygote_serves_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from docfence.sandbox import zygote

    def refused() -> int:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    parent, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours, task = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    secret = protocol.secrets_pipe({"password": "p"})
    z = zygote.Zygote(theirs)
    with parent, theirs, ours:
        z._fork("t", task, {}, secret)  # returns: the zygote goes on serving
        assert protocol.receive(ours)[0] == {"fork_failed": errno.EAGAIN}
        assert protocol.receive(ours)[0] is None  # and the task's socket is closed
        assert str(secret) not in _open_fds()  # the secrets reach no later child
        assert z.children == {} and z.by_token == {}
    os.close(z._wake_r)
    os.close(z._wake_w)
    outcome = from_fork_failure(errno.EAGAIN)
    assert (outcome.error_code, outcome.retryable) == ("render_crashed", True)
    assert "EAGAIN" in (outcome.error_message or "")


def test_descriptors_received_are_close_on_exec_and_a_bad_message_leaks_none() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r, w = os.pipe()
    os.set_inheritable(r, True)
    with a, b:
        before = _open_fds()
        protocol.send(a, {"op": "x"}, [r])
        message, fds = protocol.receive(b)
        assert message == {"op": "x"} and len(fds) == 1
        assert not os.get_inheritable(fds[0])  # no process the receiver starts inherits it
        os.close(fds[0])
        socket.send_fds(a, [b"not json"], [r])
        with pytest.raises(ValueError):
            protocol.receive(b)
        socket.send_fds(a, [b"[1]"], [r])
        with pytest.raises(ValueError):
            protocol.receive(b)
        assert _open_fds() == before
    os.close(r)
    os.close(w)


def test_secrets_too_large_for_their_pipe_leave_no_descriptor_open() -> None:
    before = _open_fds()
    with pytest.raises(ValueError):
        protocol.secrets_pipe({"signing": "k" * (2 * protocol.MAX_MESSAGE)})
    assert _open_fds() == before


def test_kill_and_close_never_wait_behind_a_zygote_warming_up(tmp_path: Path) -> None:
    """A task waits for a zygote that is not ready (here one that never will be); another thread's
    kill() returns meanwhile, and close() ends the wait: the task fails, nothing raises."""
    never_ready = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    box = Sandbox.adopting("watermark", (never_ready, ours))
    result: list[Outcome] = []
    runner = threading.Thread(target=lambda: result.append(
        box.run(Task("watermark", _input(tmp_path), tmp_path / "o.pdf", LONG))))
    runner.start()
    handle = box._zygote
    assert handle is not None
    wait_for(handle._reading.locked, HANG_GUARD_S, "the task to wait for the zygote")
    killer = threading.Thread(target=box.kill, args=("someone-elses-task",))
    killer.start()
    killer.join(HANG_GUARD_S)
    assert not killer.is_alive()  # it did not wait for the zygote's "ready"
    closer = threading.Thread(target=box.close)
    closer.start()
    closer.join(HANG_GUARD_S)
    runner.join(HANG_GUARD_S)
    assert not closer.is_alive() and not runner.is_alive()
    assert result and not result[0].ok and result[0].error_code == "render_crashed"
    assert never_ready.poll() is not None
    theirs.close()


def test_a_zygote_started_from_a_short_lived_thread_outlives_it(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG fires when the thread that forked the zygote ends: the sandbox starts every
    zygote from its own long-lived thread, so a task run from a thread that then ends leaves the
    zygote serving the next task."""
    src = _input(tmp_path)
    with Sandbox("watermark") as box:
        first: list[Outcome] = []
        short = threading.Thread(target=lambda: first.append(box.run(Task("watermark", src,
                                                                          tmp_path / "a.pdf", LONG))))
        short.start()
        short.join(HANG_GUARD_S)
        assert first and first[0].ok, first
        pid = box.zygote_pid
        second = box.run(Task("watermark", src, tmp_path / "b.pdf", LONG))
        assert second.ok, second
        assert box.starts == 1 and box.zygote_pid == pid  # the same zygote, never restarted
