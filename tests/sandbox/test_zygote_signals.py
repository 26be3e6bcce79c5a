"""SIGTERM at every point of a real zygote's warm-up, serving and shutdown: no traceback on its stderr
(no "Exception ignored in: <finalize ...>"), a clean exit, no process left behind, no render folder left.

Each run is driven by a small process of its own that is a child subreaper, so whatever the zygote
leaves running is reparented to it and counted. The points come from the zygote's own trace (its
test-only hook, zygote._hook): a first run without a signal lists them, then one run per point sends
SIGTERM there (the zygote signals itself at that point: a real signal, at an exact place, no sleeps).
Hang guards only, never a timing assertion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from docfence.samples import pdfs

HANG_GUARD_S = 300

_DRIVER = r"""
import ctypes, json, os, selectors, socket, sys, time
from pathlib import Path

from docfence.core.policy import JobPolicy, Limits
from docfence.sandbox import launch, protocol
from docfence.sandbox.supervisor import Task, _request
from docfence.sandbox.zygotes import Handle, SandboxUnavailable
from docfence.testing.proctree import children, running

ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us
profile, command_line, src, folder = sys.argv[1], sys.argv[2] or None, Path(sys.argv[3]), Path(sys.argv[4])
trace = Path(os.environ["DOCFENCE_ZYGOTE_TRACE"])
GUARD = 120.0


def task_messages(control):
    # one real one-page job: its socket's messages until the zygote reports the exit (or goes)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    policy = JobPolicy(limits=Limits(render_base_s=600.0, render_timeout_s=600.0))
    request = _request(Task("watermark", src, folder / "out.pdf", policy), folder / "out.pdf.answer")
    with theirs:
        protocol.send(control, {"op": "run", "token": "t", "request": request}, [theirs.fileno()])
    seen = []
    with ours, selectors.DefaultSelector() as sel:
        sel.register(ours, selectors.EVENT_READ)
        while sel.select(GUARD):
            message = protocol.receive(ours)[0]
            if message is None:
                break
            seen.append(sorted(message))
    return seen


def settled(proc):
    # the zygote ended by itself, or its idle-time warm-up is done (it then waits for us)
    until = time.monotonic() + GUARD
    while proc.poll() is None and time.monotonic() < until:
        if "mark later-done" in trace.read_text().splitlines():
            return
        time.sleep(0.01)  # polls a file the zygote writes; no duration is guessed


proc, control = launch.spawn_zygote(profile, command_line=command_line)
zygote = Handle(proc, control)
ready, seen = False, []
try:
    zygote.await_ready()
    ready = True
except SandboxUnavailable:
    pass
if ready:
    try:
        seen = task_messages(control)
    except OSError:
        pass
    settled(proc)
zygote.stop(busy=False)  # what the sandbox does when nothing of its runs
orphans = [pid for pid in children(os.getpid()) if running(pid)]
while True:
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
            break
    except ChildProcessError:
        break
print(json.dumps({"rc": proc.returncode, "ready": ready, "task": seen, "orphans": orphans,
                  "tmp": sorted(p.name for p in Path(os.environ["TMPDIR"]).iterdir())}))
"""


def _drive(tmp_path: Path, profile: str, command_line: str, term_at: str | None,
           run: int) -> tuple[dict[str, object], list[str], str]:
    """One zygote's life, SIGTERM at `term_at` (None: never): the driver's report, the zygote's trace
    and its stderr."""
    folder = tmp_path / f"run-{run}"
    (folder / "tmp").mkdir(parents=True)
    src = folder / "in.pdf"
    src.write_bytes(pdfs.links())
    trace = folder / "trace"
    trace.touch()
    env = {**os.environ, "TMPDIR": str(folder / "tmp"), "DOCFENCE_ZYGOTE_TRACE": str(trace)}
    env.pop("DOCFENCE_ZYGOTE_TERM_AT", None)
    if term_at is not None:
        env["DOCFENCE_ZYGOTE_TERM_AT"] = term_at
    ran = subprocess.run([sys.executable, "-c", _DRIVER, profile, command_line, str(src), str(folder)],
                         capture_output=True, text=True, env=env, timeout=HANG_GUARD_S, check=False)
    assert ran.returncode == 0 and ran.stdout.strip(), (term_at, ran.stderr)
    report: dict[str, object] = json.loads(ran.stdout.strip().splitlines()[-1])
    return report, trace.read_text().splitlines(), ran.stderr


def _points(trace: list[str], kind: str | None = None) -> list[str]:
    """The distinct point names of a trace, in order (of one kind: "check" or "mark")."""
    names: list[str] = []
    for line in trace:
        which, _, name = line.partition(" ")
        if (kind is None or which == kind) and name not in names:
            names.append(name)
    return names


def _assert_clean(report: dict[str, object], trace: list[str], stderr: str, where: str) -> None:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, (where, stderr)
    assert stderr == "", (where, stderr)
    assert report["rc"] == 0, (where, report, trace[-5:])  # stopped itself, not killed after a grace
    assert report["orphans"] == [], (where, report)
    assert report["tmp"] == [], (where, report)  # no render folder, no warm-up copy left


@pytest.mark.parametrize(("profile", "command_line"), [("watermark", ""), ("watermark", "ascii")],
                         ids=["worker", "command-line"])
def test_sigterm_at_every_point_of_a_zygotes_life_leaves_no_trace(tmp_path: Path, profile: str,
                                                                   command_line: str) -> None:
    report, trace, stderr = _drive(tmp_path, profile, command_line, None, 0)
    _assert_clean(report, trace, stderr, "no signal")
    task = report["task"]
    assert report["ready"] and isinstance(task, list) and ["answered"] in task, report  # the job ran
    points = _points(trace)
    for expected in ("start", "imports", "font-0", "sample-vector", "ready", "fork", "reap",
                     "later-1", "later-done", "shutdown", "shutdown-done"):
        assert expected in points, (expected, points)
    # each point, SIGTERM just there; each checkpoint also with the signal just after its look at the
    # flag, so it comes during the phase that follows and is seen at the next checkpoint
    afters = [f"after:{name}" for name in _points(trace, "check")] if command_line else []
    stops = [*points, *afters]
    for run, term_at in enumerate(stops, start=1):
        report, trace, stderr = _drive(tmp_path, profile, command_line, term_at, run)
        _assert_clean(report, trace, stderr, term_at)
        name = term_at.removeprefix("after:")
        assert f"check {name}" in trace or f"mark {name}" in trace, (term_at, trace)  # it got there
        ended = {"mark stopped-warming", "mark shutdown-done"} & set(trace)
        assert ended, (term_at, trace[-5:])  # and stopped by its own way out
    assert len(stops) >= 20  # the loop above ran over the whole life, not over nothing


_STOPPED_DURING_A_PHASE = """
import os, signal, socket, sys, tempfile
from pathlib import Path
from docfence.sandbox import zygote

folder = Path(sys.argv[1])
ran = []


def step():  # an idle-time warm-up step of three phases, each holding a temporary file as it works
    for phase in range(3):
        zygote.checkpoint(f"phase-{phase}")
        with tempfile.NamedTemporaryFile(dir=folder, prefix="warm-"):
            ran.append(str(phase))
            if phase == 0:
                os.kill(os.getpid(), signal.SIGTERM)  # comes in the middle of the phase
                ran.append("rest-of-0")


signal.signal(signal.SIGTERM, zygote._on_term)
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
zygote.Zygote(theirs).serve((step,), idle_s=0.0)
print(" ".join(ran))
"""


def test_sigterm_during_a_warm_up_phase_lets_it_finish_and_stops_at_the_next_checkpoint(
        tmp_path: Path) -> None:
    """The handler raises nothing into the phase it interrupts (a library's finalizer may be running
    there): the phase ends as it would, its temporary file goes with it, and the next checkpoint
    stops the zygote, which then shuts down as usual."""
    ran = subprocess.run([sys.executable, "-c", _STOPPED_DURING_A_PHASE, str(tmp_path)],
                         capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)
    assert (ran.returncode, ran.stderr) == (0, "")
    assert ran.stdout.split() == ["0", "rest-of-0"]  # phases 1 and 2 never started
    assert list(tmp_path.iterdir()) == []
