"""A render process inherits only what its task needs (issue 30, L3): seen from outside a real, confined
render process stalled at its `render` fault point, it holds only its task socket, its lock file and
/dev/null as stdin/stdout/stderr (no zygote epoll or wake-up pipe, no worker stdout/stderr), leads its
own process group, and has an RLIMIT_FSIZE sized by its job; a write past that limit fails with EFBIG
(not a SIGXFSZ death), and the zygote's group kill, as the subreaper, ends what a render process left."""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from docfence.core.policy import JobPolicy, Limits
from docfence.samples import pdfs
from docfence.sandbox import Outcome, Sandbox, Task, inherit
from docfence.sandbox.zygote import private_tmp
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.procs import wait_for
from docfence.testing.proctree import render_processes

POLICY = JobPolicy(limits=Limits(render_base_s=600.0, render_timeout_s=600.0, max_output_bytes=64 << 20))


@contextmanager
def stalled_render_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The pid of a real render process, confined and stalled at its `render` fault point; killed after."""
    monkeypatch.setenv("DOCFENCE_FAULTS", "render=sleep:3600")
    monkeypatch.setenv("DOCFENCE_FAULTS_DIR", str(tmp_path))
    source = tmp_path / "in.pdf"
    source.write_bytes(pdfs.many_pages(1))
    with Sandbox("watermark") as box:
        box.start()
        done: list[Outcome] = []
        thread = threading.Thread(target=lambda: done.append(
            box.run(Task("watermark", source, tmp_path / "out.pdf", POLICY))))
        thread.start()
        pid = 0
        try:
            (pid,) = wait_for(lambda: render_processes(box.zygote_pid or 0), HANG_GUARD_S, "a render process")
            wait_for(lambda: Path(f"/proc/{pid}/status").read_text().count("NoNewPrivs:\t1") == 1,
                     HANG_GUARD_S, "the render process confined")
            yield pid
        finally:
            if pid:
                os.kill(pid, signal.SIGKILL)
            thread.join(HANG_GUARD_S)
    assert done and not done[0].ok  # killed at the fault point


def _fds(pid: int) -> dict[int, str]:
    folder = Path(f"/proc/{pid}/fd")
    return {int(name): os.readlink(folder / name) for name in os.listdir(folder)}


def test_a_render_process_holds_only_its_task_descriptors(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with stalled_render_process(tmp_path, monkeypatch) as pid:
        fds = _fds(pid)
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        limits = Path(f"/proc/{pid}/limits").read_text()
    assert {fds[n] for n in (0, 1, 2)} == {"/dev/null"}  # not the worker's log or terminal
    rest = {fd: target for fd, target in fds.items() if fd > 2}
    sockets = [t for t in rest.values() if t.startswith("socket:")]
    assert len(sockets) == 1 and len(rest) == 2, rest  # its task socket and its folder's lock
    (lock,) = [t for t in rest.values() if not t.startswith("socket:")]
    assert lock == os.path.join(private_tmp(pid), ".owner")
    assert not [t for t in fds.values() if "eventpoll" in t or t.startswith("pipe:")]
    assert int(stat[2]) == pid  # the leader of its own process group (pgrp field of /proc/PID/stat)
    size = str(inherit.file_size_limit(len(pdfs.many_pages(1)), 64 << 20))
    assert [line.split()[3:5] for line in limits.splitlines() if line.startswith("Max file size")] == [
        [size, size]]


def test_a_process_in_a_render_process_group_dies_when_it_ends(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A process in the render process's group (as anything it forks is) is killed by the real zygote
    when the render process ends: here one that joined the group from outside, as the render process
    cannot be made to fork at its fault point."""
    member = 0
    try:
        with stalled_render_process(tmp_path, monkeypatch) as pid:
            member = os.fork()
            if member == 0:
                try:
                    os.setpgid(0, pid)
                    signal.pause()
                finally:
                    os._exit(0)
            wait_for(lambda: os.getpgid(member) == pid, HANG_GUARD_S, "the member in the group")
        # the render process was killed and reaped; its group went with it
        _, status = wait_for(lambda: _reaped(member), HANG_GUARD_S, "the group member killed")
        member = 0
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    finally:
        if member:
            os.kill(member, signal.SIGKILL)
            os.waitpid(member, 0)


def _reaped(pid: int) -> tuple[int, int] | None:
    done, status = os.waitpid(pid, os.WNOHANG)
    return (done, status) if done else None


def _in_child(body: object) -> int:
    """Run `body` in a forked process; its exit status (0: it returned)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            body()  # type: ignore[operator]
            code = 0
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


def test_a_write_past_the_file_size_limit_fails_with_efbig(tmp_path: Path) -> None:
    target = tmp_path / "big"

    def write_past() -> None:
        inherit.limit_file_size(4096)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
        assert os.write(fd, b"x" * 4096) == 4096
        try:
            os.write(fd, b"y")
        except OSError as exc:
            assert exc.errno == errno.EFBIG
            return
        raise AssertionError("the write past the limit succeeded")

    status = _in_child(write_past)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert target.stat().st_size == 4096


def test_what_a_render_process_started_dies_with_its_group(tmp_path: Path) -> None:
    """The zygote's mechanism in a stand-in: a subreaper whose child (in its own group) starts a
    grandchild and exits; the grandchild comes back to the subreaper, and the group kill ends it."""
    barrier = tmp_path / "grandchild"

    def subreaper() -> None:
        inherit.become_subreaper()
        r, w = os.pipe()
        child = os.fork()
        if child == 0:
            inherit.own_group()
            if os.fork() == 0:  # the grandchild: stays, unless killed
                os.close(r)
                os.write(w, str(os.getpid()).encode())
                os.close(w)
                signal.pause()
                os._exit(0)
            os._exit(0)
        inherit.own_group(child)
        os.close(w)
        grandchild = int(os.read(r, 32))
        os.waitpid(child, 0)
        assert os.getpgid(grandchild) == child
        assert Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(os.getpid())
        inherit.kill_group(child)
        pid, status = os.waitpid(grandchild, 0)  # adopted: ours to reap
        assert pid == grandchild and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        barrier.write_text("reaped")

    status = _in_child(subreaper)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert barrier.read_text() == "reaped"


def test_a_write_past_the_file_size_limit_is_a_resource_error_not_an_engine_error() -> None:
    """EFBIG is the job's own limit, coded as its memory and CPU limits are (not engine_error)."""
    from docfence.sandbox.outcomes import from_exception

    outcome = from_exception(OSError(errno.EFBIG, "File too large"))
    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, "render_resource_exceeded", False)
    assert from_exception(OSError(errno.EIO, "I/O error")).error_code == "engine_error"
