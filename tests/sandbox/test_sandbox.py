"""The sandbox with a real zygote and real render processes: one process per task, the outcome mapping,
limits, cancellation, a zygote that dies. Hang guards only, never a timing assertion."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from docfence.core.errors import ConfigError, EngineError, RenderCrashed
from docfence.core.policy import JobPolicy, Kind, Limits, Mode
from docfence.samples import pdfs
from docfence.sandbox import Outcome, Sandbox, Task
from docfence.sandbox.outcomes import from_exception, from_exit
from docfence.testing.procs import wait_for
from docfence.testing.proctree import children, render_processes, running

HANG_GUARD_S = 120  # generous: the machine is shared; an expiry means a hang, not slowness
# Tests whose subject is not the wall-clock budget run under one only a hang exceeds, so a render slowed
# down by a loaded machine (or a stall the test ends itself) is never stopped by the budget first.
LONG = JobPolicy(limits=Limits(render_base_s=600.0, render_timeout_s=600.0))


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox() as shared:
        shared.start()
        yield shared


@pytest.fixture
def stalling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    """A sandbox whose render processes stall at the `render` fault point until killed."""
    monkeypatch.setenv("DOCFENCE_FAULTS", "render=sleep:3600")
    monkeypatch.setenv("DOCFENCE_FAULTS_DIR", str(tmp_path))
    with Sandbox() as stalled:
        stalled.start()
        yield stalled


def _input(tmp_path: Path, data: bytes, name: str = "in.pdf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _run_in_thread(sandbox: Sandbox, task: Task, **kwargs: object) -> tuple[threading.Thread, list[Outcome]]:
    result: list[Outcome] = []
    thread = threading.Thread(target=lambda: result.append(sandbox.run(task, **kwargs)))  # type: ignore[arg-type]
    thread.start()
    return thread, result


def _render_process(sandbox: Sandbox) -> int:
    assert sandbox.zygote_pid is not None
    found: list[int] = wait_for(lambda: render_processes(sandbox.zygote_pid or 0), HANG_GUARD_S,
                                "a render process")
    return found[0]


def test_two_jobs_never_share_a_render_process(sandbox: Sandbox, tmp_path: Path) -> None:
    src = _input(tmp_path, pdfs.links())
    first = sandbox.run(Task("watermark", src, tmp_path / "a.pdf", LONG))
    second = sandbox.run(Task("watermark", src, tmp_path / "b.pdf", LONG))
    assert first.ok and second.ok, (first, second)
    assert first.process["pid"] != second.process["pid"]
    assert first.process["token"] != second.process["token"]
    assert sandbox.zygote_pid not in (first.process["pid"], second.process["pid"])
    # the first render process is gone for good: it could not serve a later job
    wait_for(lambda: not running(first.process["pid"]), HANG_GUARD_S, "the first render process to end")
    assert (tmp_path / "a.pdf").read_bytes().startswith(b"%PDF-")


def test_a_coded_document_error_keeps_its_code(sandbox: Sandbox, tmp_path: Path) -> None:
    outcome = sandbox.run(Task("watermark", _input(tmp_path, b"not a pdf"), tmp_path / "o.pdf", LONG))
    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, "not_a_pdf", False)


def test_an_engine_bug_is_engine_error_not_a_resource_limit() -> None:
    outcome = from_exception(ValueError("Crop exceeds page dimensions"))
    assert (outcome.error_code, outcome.retryable) == (EngineError.code, False)
    assert from_exception(ConfigError("bad")).error_code == "config_invalid"
    assert from_exception(MemoryError()).error_code == "render_resource_exceeded"


def test_exit_mapping() -> None:
    assert from_exit(signal.SIGKILL, killed_for=None).error_code == RenderCrashed.code
    assert from_exit(signal.SIGKILL, killed_for=None).retryable
    assert from_exit(signal.SIGXCPU, killed_for=None).error_code == "render_resource_exceeded"
    assert from_exit(signal.SIGKILL, killed_for="wall_clock").error_code == "render_resource_exceeded"
    assert from_exit(signal.SIGKILL, killed_for="canceled").canceled
    assert from_exit(None, killed_for=None).error_code == RenderCrashed.code


def test_sigkill_of_a_render_process_fails_its_own_task_only(stalling: Sandbox, tmp_path: Path) -> None:
    src = _input(tmp_path, pdfs.links())
    thread, result = _run_in_thread(stalling, Task("watermark", src, tmp_path / "o.pdf", LONG))
    victim = _render_process(stalling)
    zygote = stalling.zygote_pid
    import os

    os.kill(victim, signal.SIGKILL)
    thread.join(HANG_GUARD_S)
    assert result and (result[0].error_code, result[0].retryable) == ("render_crashed", True)
    assert stalling.zygote_pid == zygote and zygote is not None and running(zygote)  # the zygote lives on


def test_wall_clock_budget_kills_the_render_process(stalling: Sandbox, tmp_path: Path) -> None:
    tight = JobPolicy(limits=Limits(render_base_s=0.2, render_per_mb_s=0.1, render_timeout_s=0.5))
    outcome = stalling.run(Task("watermark", _input(tmp_path, pdfs.links()), tmp_path / "o.pdf", tight))
    assert (outcome.error_code, outcome.retryable) == ("render_resource_exceeded", False)
    assert "time budget" in (outcome.error_message or "")
    assert stalling.zygote_pid is not None
    wait_for(lambda: not children(stalling.zygote_pid or 0), HANG_GUARD_S, "the killed process to go")


def test_cancel_kills_and_records_nothing(stalling: Sandbox, tmp_path: Path) -> None:
    stop = threading.Event()
    src = _input(tmp_path, pdfs.links())
    thread, result = _run_in_thread(stalling, Task("watermark", src, tmp_path / "o.pdf", LONG),
                                    cancel=stop.is_set)
    _render_process(stalling)
    stop.set()
    thread.join(HANG_GUARD_S)
    assert result and result[0].canceled and not result[0].ok


def test_a_dead_zygote_fails_its_running_task_and_is_restarted(stalling: Sandbox, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    src = _input(tmp_path, pdfs.links())
    thread, result = _run_in_thread(stalling, Task("watermark", src, tmp_path / "o.pdf", LONG))
    victim = _render_process(stalling)
    import os

    assert stalling.zygote_pid is not None
    monkeypatch.delenv("DOCFENCE_FAULTS")  # the restarted zygote's children run normally
    os.kill(stalling.zygote_pid, signal.SIGKILL)
    thread.join(HANG_GUARD_S)
    assert result and result[0].error_code == "render_crashed"
    wait_for(lambda: not running(victim), HANG_GUARD_S, "the orphaned render process to die with its zygote")
    again = stalling.run(Task("watermark", src, tmp_path / "o2.pdf", LONG))
    assert again.ok and stalling.starts == 2


def test_memory_limit_fails_the_task_not_the_sandbox(sandbox: Sandbox, tmp_path: Path) -> None:
    # a 100 DPI raster of an A4 page passes the raster engine's own pixel check (~0.97 Mpx, 7.7 MB held
    # at 8 bytes a pixel, within 8 MB) yet needs more than the 8 MB this job may add to the warm process
    # once it is drawn and encoded: the sandbox's memory limit, not the engine, ends it
    starved = JobPolicy(mode=Mode.RASTER, dpi=100, limits=Limits(render_memory_mb=8))
    src = _input(tmp_path, pdfs.many_pages(2))
    outcome = sandbox.run(Task("watermark", src, tmp_path / "o.pdf", starved))
    assert not outcome.ok and outcome.error_code in ("render_resource_exceeded", "render_crashed"), outcome
    assert sandbox.run(Task("watermark", src, tmp_path / "ok.pdf", LONG)).ok


def test_heartbeat_runs_while_the_task_runs_and_its_error_stops_it(stalling: Sandbox, tmp_path: Path) -> None:
    class LeaseGone(Exception):
        pass

    beats: list[int] = []

    def heartbeat() -> None:
        beats.append(1)
        if len(beats) >= 3:
            raise LeaseGone

    src = _input(tmp_path, pdfs.links())
    with pytest.raises(LeaseGone):
        stalling.run(Task("watermark", src, tmp_path / "o.pdf", LONG), heartbeat=heartbeat,
                     heartbeat_interval_s=0.05)
    assert stalling.zygote_pid is not None
    wait_for(lambda: not children(stalling.zygote_pid or 0), HANG_GUARD_S, "the render process to be killed")


def test_budget_scales_with_input() -> None:
    limits = Limits()
    tiny = limits.render_budget_s(input_bytes=2500, pages=1)
    big = limits.render_budget_s(input_bytes=50 * 1024 * 1024, pages=2000)
    assert tiny < 15 < big <= limits.render_timeout_s
    assert limits.render_budget_s(input_bytes=2500) <= tiny


def test_a_render_process_reports_where_its_cpu_went(sandbox: Sandbox, tmp_path: Path) -> None:
    outcome = sandbox.run(Task("watermark", _input(tmp_path, pdfs.links()), tmp_path / "out.pdf",
                               JobPolicy(mode=Mode.VECTOR)))
    assert outcome.ok
    for measure in ("cpu_ms", "subprocess_cpu_ms", "minflt"):
        assert set(outcome.process[measure]) == {"before", "setup", "task"}
    assert outcome.process["cpu_ms"]["task"] > 0  # the engine ran in this process


def test_the_watermark_profile_leaves_the_report_engine_out_but_runs_any_kind(tmp_path: Path) -> None:
    from docfence.engines.report.bundle import TemplateBundle
    from docfence.reports.templates import encode_assets
    from docfence.sandbox import zygote
    from docfence.sandbox.report_job import build_snapshot

    assert zygote._import_reports not in zygote.warm_later("watermark")
    assert zygote._import_reports in zygote.warm_later("all")
    schema = {"type": "object"}
    bundle = TemplateBundle(name="t", html="<h1>{{ title }}</h1>", css="", schema=schema)
    from docfence.engines.report.render import template_hash

    snapshot = build_snapshot(name="t", html=bundle.html, css="", assets_b64=encode_assets(bundle),
                              schema=schema, sha256=template_hash(bundle), data={"title": "Hi"}, variant=None)
    report = _input(tmp_path, snapshot, "snapshot.json")
    for profile in ("watermark", "report"):
        with Sandbox(profile) as box:
            outcome = box.run(Task("report", report, tmp_path / f"{profile}.pdf",
                                   JobPolicy(kind=Kind.REPORT, watermark=None)))
            assert outcome.ok and outcome.pages == 1, outcome
    with pytest.raises(ValueError):
        Sandbox("nonsense")


def test_a_zygote_runs_its_parents_docfence_whatever_the_working_directory_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m` puts the working directory first on a child's path: a service started from a folder
    holding another docfence checkout ran that code in its zygote. Here that folder's docfence refuses
    to import, so a zygote that picked it up would never start."""
    poisoned = tmp_path / "elsewhere"
    (poisoned / "docfence").mkdir(parents=True)
    (poisoned / "docfence" / "__init__.py").write_text("raise SystemExit('the wrong docfence')\n")
    monkeypatch.chdir(poisoned)
    src = _input(tmp_path, pdfs.links())
    with Sandbox("watermark") as box:
        outcome = box.run(Task("watermark", src, tmp_path / "out.pdf", LONG))
    assert outcome.ok, outcome
    assert (tmp_path / "out.pdf").read_bytes().startswith(b"%PDF-")


def test_a_render_process_parses_a_fallback_font_its_zygote_did_not(tmp_path: Path) -> None:
    """A command-line zygote for ASCII text parses only its first font before forking; a task whose
    mark needs the CJK fallback still draws it (its render process parses the font) and validates."""
    from docfence.core.policy import WatermarkSpec
    from docfence.sandbox.launch import spawn_zygote

    policy = JobPolicy(watermark=WatermarkSpec(text="患者 Müller"))
    with Sandbox.adopting("watermark", spawn_zygote("watermark", command_line="ascii")) as ascii_only:
        task = Task("watermark", _input(tmp_path, pdfs.links()), tmp_path / "o.pdf", policy)
        outcome = ascii_only.run(task)
    assert outcome.ok, outcome
    assert (tmp_path / "o.pdf").read_bytes().startswith(b"%PDF-")


def _script(script: str) -> subprocess.CompletedProcess[str]:
    """`script` run by a Python of its own (zygote code sets process-wide state: signal handlers, gc)."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, check=False)


def _signalled(script: str, folder: Path, marker: str, what: str) -> tuple[int, str, str]:
    """`script` (given `folder`) run until it creates `folder / marker`, then sent SIGTERM: its exit code,
    output and errors."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(folder)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (folder / marker).exists(), HANG_GUARD_S, what)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        proc.kill()
    return proc.returncode, out, err


_COMMAND_LINE_ORDER = """
import socket
from docfence.sandbox import protocol, zygote

order = []
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def freeze():
    order.append("freeze")
    if "marks" in order:
        ours.close()  # the zygote's parent goes: serve returns


zygote._sample = lambda mode: order.append("sample")
zygote._warm_marks = lambda default_only: order.append("marks")
zygote._freeze = freeze


class Recording(zygote.Zygote):
    def _fork(self, token, task, request, secrets_fd):
        order.append("fork")
        task.close()


zygote.warm(every_font=False, marks=False)
job, _ = socket.socketpair()
protocol.send(ours, {"op": "run", "token": "t", "request": {}}, [job.fileno()])  # waiting on "ready"
Recording(theirs).serve(zygote.COMMAND_LINE_LATER, idle_s=zygote.COMMAND_LINE_IDLE_S)
print(",".join(order))
"""


def test_a_command_line_zygote_forks_the_waiting_file_before_warming_the_class_marks() -> None:
    """A one-file run's request, sent when the zygote says it is ready, is forked at once; the default
    class's marks are warmed after it (on the core the run leaves idle), then the heap frozen again.
    In a process of its own: warm() and serve() set process-wide state (signal handlers, gc)."""
    ran = _script(_COMMAND_LINE_ORDER)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["sample,freeze,fork,marks,freeze"]


_STOPPED_WHILE_IDLE = """
import signal, socket, sys
from pathlib import Path
from docfence.sandbox import zygote

signal.signal(signal.SIGTERM, zygote._on_term)
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
(Path(sys.argv[1]) / "serving").touch()
zygote.Zygote(theirs).serve(())
print("stopped")
signal.raise_signal(signal.SIGTERM)  # a second one, at exit (systemd's and the parent's): nothing raised
print("exited")
"""


def test_a_stop_outside_a_warm_up_step_ends_the_loop_without_raising_anything(tmp_path: Path) -> None:
    """SIGTERM while the zygote waits (or forks, or reaps) only asks the loop to end, which it does
    once woken, shutting its children down; a further SIGTERM as it exits raises nothing either."""
    code, out, err = _signalled(_STOPPED_WHILE_IDLE, tmp_path, "serving", "the zygote to serve")
    assert code == 0 and err == "", err
    assert out.split() == ["stopped", "exited"]


def test_a_starting_zygote_removes_the_folders_of_render_processes_killed_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A render process killed with its zygote (the worker SIGKILLed) leaves its private folder; the
    next zygote on the host removes it before its first fork, and keeps a living process's."""
    import os

    from docfence.sandbox.scratch import LOCK_NAME
    from docfence.sandbox.zygote import RENDER_TMP_PREFIX

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the zygote's temporary folder
    left = tmp_path / f"{RENDER_TMP_PREFIX}{gone.pid}"
    left.mkdir()
    (left / "docfence-check-x.pdf").write_bytes(b"%PDF- a copy of someone's document")
    (left / LOCK_NAME).touch()  # its lock, released when it was killed
    living = tmp_path / f"{RENDER_TMP_PREFIX}{os.getpid()}"
    living.mkdir()
    with Sandbox("watermark") as box:
        box.start()
    assert not left.exists() and living.is_dir()


def test_a_render_process_locks_its_folder_while_it_runs_and_the_zygote_removes_it(
        stalling: Sandbox, tmp_path: Path) -> None:
    """The lock is what another host-sharing zygote's sweep (scratch.remove_orphans) respects."""
    import fcntl
    import os
    import tempfile

    from docfence.sandbox.scratch import LOCK_NAME

    thread, result = _run_in_thread(stalling, Task("watermark", _input(tmp_path, pdfs.links()),
                                                   tmp_path / "o.pdf", LONG))
    victim = _render_process(stalling)
    lock = Path(tempfile.gettempdir()) / f"docfence-render-{victim}" / LOCK_NAME

    def held() -> bool:
        try:
            fd = os.open(lock, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    wait_for(held, HANG_GUARD_S, "the render process to lock its folder")
    os.kill(victim, signal.SIGKILL)
    thread.join(HANG_GUARD_S)
    assert result and result[0].error_code == "render_crashed"
    wait_for(lambda: not lock.parent.exists(), HANG_GUARD_S, "the zygote to remove the folder")


_STOPPED_BEFORE_READY = """
import socket
from docfence.sandbox import zygote

ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
zygote._Term.wanted = True  # SIGTERM came between two warm-up steps, outside either
ours.close()  # the parent closes our socket before it signals
zygote.Zygote(theirs).serve(())
print("stopped")
"""


def test_a_zygote_stopped_before_it_was_ready_says_nothing_to_the_closed_socket() -> None:
    """No "ready" (the parent is gone), no BrokenPipeError on the command's terminal."""
    ran = _script(_STOPPED_BEFORE_READY)
    assert (ran.returncode, ran.stdout.split(), ran.stderr) == (0, ["stopped"], "")
