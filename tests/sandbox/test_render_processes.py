"""A render process cannot fork without bound, and nothing it starts outlives its job (issue 30, L3): code
run inside a real, confined render process (planted as the interpreter's sitecustomize, as a document that
took over the renderer would run its own) forks in a loop and each child tries to leave the process
group; the kernel refuses the fork past inherit.process_limit() with EAGAIN, seccomp refuses every
setsid, and once the job has ended none of the children is alive. The same limit is checked in a forked
process for each way it is counted (a real uid of its own as root, a user namespace otherwise)."""

from __future__ import annotations

import errno
import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from docfence.core.interpreter import PACKAGE_ROOT
from docfence.core.policy import JobPolicy, Limits
from docfence.samples import pdfs
from docfence.sandbox import Outcome, Sandbox, Task, inherit
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.forked import in_forked_child
from docfence.testing.procs import wait_for

ATTEMPTS = 64  # forks the hostile code tries; today's limit is a few times the cores
POLICY = JobPolicy(limits=Limits(render_base_s=600.0, render_timeout_s=600.0))

# The hostile code: at the render fault point (after confinement, before the document is read) fork
# until refused; every child tries setsid (to escape the group kill), reports through a pipe and waits
# forever, holding the write end of a pipe nobody reads, so nothing but a kill ends it.
HOOK = '''
import json, os, signal, sys
sys.path.insert(0, {root!r})
import docfence.faults as _faults

_original = _faults.fault_point


def _fork_loop(folder):
    report_r, report_w = os.pipe()
    forked, refused = [], 0
    for _ in range({attempts}):
        try:
            pid = os.fork()
        except OSError as exc:
            refused = exc.errno or -1
            break
        if pid == 0:
            try:
                os.setsid()
                os.write(report_w, b"s")
            except OSError:
                os.write(report_w, b"-")
            while True:
                signal.pause()
        forked.append(pid)
    seen = os.read(report_r, len(forked)) if forked else b""
    while len(seen) < len(forked):
        seen += os.read(report_r, len(forked) - len(seen))
    with open(os.path.join(folder, "fork-loop.json"), "w") as fh:
        json.dump({{"pid": os.getpid(), "forked": forked, "refused": refused, "setsid": seen.decode()}}, fh)


def fault_point(point, **kwargs):
    if point == "render":
        _fork_loop(os.environ["DOCFENCE_FAULTS_DIR"])
    return _original(point, **kwargs)


_faults.fault_point = fault_point
'''


@pytest.fixture
def hostile_render_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The zygote started after this imports HOOK (PYTHONPATH is on the sandbox's allow-list), so each of
    its render processes runs the fork loop; the folder the loop reports to (and the barrier's)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK.format(root=PACKAGE_ROOT, attempts=ATTEMPTS))
    faults = tmp_path / "faults"
    faults.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(hook), os.environ.get("PYTHONPATH")))))
    monkeypatch.setenv("DOCFENCE_FAULTS", "render=wait:fork-loop")
    monkeypatch.setenv("DOCFENCE_FAULTS_DIR", str(faults))
    yield faults


def _alive(pid: int) -> bool:
    """Running or stopped, not gone and not a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_fork_loop_in_a_render_process_is_bounded_and_dies_with_its_job(
        tmp_path: Path, hostile_render_code: Path) -> None:
    source = tmp_path / "in.pdf"
    source.write_bytes(pdfs.many_pages(1))
    seen: dict[str, object] = {}
    with Sandbox("watermark") as box:
        box.start()
        done: list[Outcome] = []
        thread = threading.Thread(target=lambda: done.append(
            box.run(Task("watermark", source, tmp_path / "out.pdf", POLICY))))
        thread.start()
        try:
            report = hostile_render_code / "fork-loop.json"
            wait_for(lambda: (hostile_render_code / "reached-render").exists(), HANG_GUARD_S, "the fork loop")
            seen = json.loads(report.read_text())
            forked = list(seen["forked"])  # type: ignore[call-overload]
            limit = inherit.process_limit()
            assert 1 <= len(forked) <= limit - 1, (len(forked), limit)  # validation may fork; a bomb not
            assert seen["refused"] == errno.EAGAIN
            assert seen["setsid"] == "-" * len(forked)  # seccomp: no child left the group
            # while the job runs they live, in its group
            assert [pid for pid in forked if _alive(pid)] == forked
            assert {os.getpgid(pid) for pid in forked} == {seen["pid"]}
            (hostile_render_code / "release-fork-loop").touch()
            thread.join(HANG_GUARD_S)
            assert done, "the task did not end"
            # the render process has ended and the zygote has killed its group: nothing of it is left
            wait_for(lambda: not [pid for pid in forked if _alive(pid)], HANG_GUARD_S, "every child killed")
        finally:
            (hostile_render_code / "release-fork-loop").touch()
            _kill_all(list(seen.get("forked", [])))  # type: ignore[call-overload]
            thread.join(HANG_GUARD_S)


def _fork_until_refused(limit: int) -> dict[str, object]:
    """In a forked child: limit_processes(limit), then fork until refused; children wait to be killed."""
    counted = inherit.limit_processes(limit)
    children: list[int] = []
    refused = 0
    try:
        for _ in range(ATTEMPTS):
            try:
                pid = os.fork()
            except OSError as exc:
                refused = exc.errno or -1
                break
            if pid == 0:
                signal.pause()
                os._exit(0)
            children.append(pid)
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return {"counted": counted, "forked": len(children), "refused": refused, "ruid": os.getresuid()[0]}


@pytest.mark.skipif(os.geteuid() != 0, reason="root's own way: a real uid of the render process's own")
def test_as_root_the_limit_is_counted_by_a_real_uid_of_its_own() -> None:
    seen = in_forked_child(lambda: _fork_until_refused(4))
    assert seen["counted"] == "uid" and seen["forked"] == 3 and seen["refused"] == errno.EAGAIN, seen
    assert seen["ruid"] != 0  # uid 0 is never counted


def _as_unprivileged_user(limit: int) -> dict[str, object]:
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)  # every other process of this user does not count: a namespace
    return _fork_until_refused(limit)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become an unprivileged user")
def test_as_another_user_the_limit_is_counted_in_a_user_namespace_of_its_own() -> None:
    holders = []
    try:  # processes of that user outside the render process, which must not use up its limit
        for _ in range(6):
            pid = os.fork()
            if pid == 0:
                os.setresuid(65534, 65534, 65534)
                signal.pause()
                os._exit(0)
            holders.append(pid)
        seen = in_forked_child(lambda: _as_unprivileged_user(4))
    finally:
        for pid in holders:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if seen["counted"] == "":
        pytest.skip("this machine refuses user namespaces")
    assert seen["counted"] == "userns" and seen["forked"] == 3 and seen["refused"] == errno.EAGAIN, seen


def test_the_limit_covers_what_validation_runs_at_once() -> None:
    """Per core a piece (or a raster range and its two encoder threads), the background libqpdf read,
    pdfinfo, and spare; a real many-page job of each mode passes under it (test_second_reader and the
    sandbox tests run real jobs under it too)."""
    assert inherit.process_limit(1) == 7 and inherit.process_limit(2) == 10
    assert inherit.process_limit() == 3 * len(os.sched_getaffinity(0)) + 4
