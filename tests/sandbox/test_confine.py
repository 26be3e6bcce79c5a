"""Render processes are confined (Landlock and seccomp): a forked process under a real ruleset is refused
what a hostile document must not reach (another file, the working folder's database, a folder, a TCP or
UDP or Unix socket, a signal to its parent), and keeps what its task needs; every render process of a
real sandbox runs confined as far as the machine allows, and jobs still work."""

from __future__ import annotations

import os
import signal
import socket
import sys
import sysconfig
import threading
from collections.abc import Iterator
from pathlib import Path

import py_landlock.landlock
import pytest
from py_landlock.errors import LandlockDisabledError

from docfence.core.policy import JobPolicy
from docfence.samples import pdfs
from docfence.sandbox import Sandbox, Task
from docfence.sandbox.confine import Confinement, _landlock, available, confine, prepare, readable_by_render
from docfence.sandbox.zygote import private_tmp
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.forked import in_forked_child
from docfence.testing.procs import wait_for
from docfence.testing.proctree import render_processes

FULL = available()["landlock"] >= 6 and available()["sockets"]


def _attempt(name: str, action: object) -> str:
    try:
        action()  # type: ignore[operator]
    except PermissionError:
        return "refused"
    except OSError as exc:
        return f"error {exc.errno}"
    return "allowed"


def _confined_child(plan: Confinement, probes: dict[str, object]) -> dict[str, str]:
    """Fork, confine the child to `plan`, run each probe there; what each probe met."""

    def body() -> dict[str, str]:
        os.chdir(os.environ["PROBE_CWD"])  # as the zygote runs: `python -m` from the data folder
        sys.path.insert(0, os.getcwd())
        applied = confine(plan)
        return {"abi": str(applied["landlock"]), "sockets": str(applied["sockets"]),
                **{name: _attempt(name, probe) for name, probe in probes.items()}}

    return in_forked_child(body)


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.skipif(not FULL, reason="needs Landlock ABI 6 (Linux 6.12+) and libseccomp")
def test_a_confined_process_reaches_only_what_its_task_needs(tmp_path: Path, listener: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "input.pdf").write_bytes(b"%PDF-1.7 input")
    (job / "output.pdf").write_bytes(b"")
    private = tmp_path / "private"
    private.mkdir()
    data = tmp_path / "docfence-data"  # the default database and blob folder, in the working folder
    data.mkdir()
    database = data / "docfence.db"
    database.write_bytes(b"SQLite format 3")
    monkeypatch.setenv("PROBE_CWD", str(tmp_path))
    unix = tmp_path / "db.sock"  # stands for PostgreSQL's socket
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(unix))
    server.listen()
    other_job = tmp_path / "other-job"
    other_job.mkdir()
    (other_job / "input.pdf").write_bytes(b"%PDF-1.7 another tenant")
    parent = os.getpid()
    held = os.open(database, os.O_RDONLY)  # a descriptor the parent holds: reachable through /proc?
    plan = Confinement(read_files=(str(job / "input.pdf"),), write_files=(str(job / "output.pdf"),),
                       private_dirs=(str(private),))
    seen = _confined_child(plan, {
        "read input": lambda: (job / "input.pdf").read_bytes(),
        "write output": lambda: (job / "output.pdf").write_bytes(b"%PDF-1.7 out"),
        "temporary file": lambda: (private / "copy.pdf").write_bytes(b"x"),
        "import a module": lambda: __import__("email.mime.text"),
        "read the database": lambda: database.read_bytes(),
        "read another job": lambda: (other_job / "input.pdf").read_bytes(),
        "write beside the output": lambda: (job / "extra.pdf").write_bytes(b"x"),
        "overwrite the input": lambda: (job / "input.pdf").write_bytes(b"x"),
        "list the job folder": lambda: os.listdir(job),
        "connect over TCP": lambda: socket.create_connection(("127.0.0.1", listener), timeout=5).close(),
        "send over UDP": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
            b"x", ("127.0.0.1", listener)),
        "connect to a Unix socket": lambda: socket.socket(socket.AF_UNIX).connect(str(unix)),
        "read from the working folder": lambda: Path("docfence-data/docfence.db").read_bytes(),
        "signal the parent": lambda: os.kill(parent, 0),
        "read the parent's environment": lambda: Path(f"/proc/{parent}/environ").read_bytes(),
        "read the parent's command line": lambda: Path(f"/proc/{parent}/cmdline").read_bytes(),
        "read the parent's status": lambda: Path(f"/proc/{parent}/status").read_bytes(),
        "read the parent's memory map": lambda: Path(f"/proc/{parent}/maps").read_bytes(),
        "read its own status": lambda: Path("/proc/self/status").read_bytes(),
        "open the parent's database descriptor": lambda: Path(f"/proc/{parent}/fd/{held}").read_bytes(),
        "read the parent's memory": lambda: Path(f"/proc/{parent}/mem").open("rb").close(),
    })
    os.close(held)
    server.close()
    assert int(seen.pop("abi")) >= 6 and seen.pop("sockets") == "True"
    assert seen == {
        "read input": "allowed", "write output": "allowed", "temporary file": "allowed",
        "import a module": "allowed", "read the database": "refused", "read another job": "refused",
        "write beside the output": "refused", "overwrite the input": "refused",
        "list the job folder": "refused", "connect over TCP": "refused", "signal the parent": "refused",
        "send over UDP": "refused", "connect to a Unix socket": "refused",
        "read from the working folder": "refused", "read the parent's environment": "refused",
        "read the parent's command line": "refused", "read the parent's status": "refused",
        "read the parent's memory map": "refused",
        "read its own status": "allowed",
        "open the parent's database descriptor": "refused", "read the parent's memory": "refused",
    }
    assert (job / "output.pdf").read_bytes() == b"%PDF-1.7 out"
    assert not (job / "extra.pdf").exists() and database.read_bytes() == b"SQLite format 3"


@pytest.mark.skipif(not FULL, reason="needs Landlock ABI 6 (Linux 6.12+) and libseccomp")
def test_a_running_render_process_is_under_seccomp_and_no_new_privileges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen from outside, while the task runs (stalled at its `render` fault point): the kernel reports
    the render process's seccomp filter and no_new_privs, which Landlock requires."""
    monkeypatch.setenv("DOCFENCE_FAULTS", "render=sleep:3600")
    monkeypatch.setenv("DOCFENCE_FAULTS_DIR", str(tmp_path))
    source = tmp_path / "in.pdf"
    source.write_bytes(pdfs.links())
    with Sandbox() as sandbox:
        sandbox.start()
        done: list[object] = []
        thread = threading.Thread(target=lambda: done.append(
            sandbox.run(Task("watermark", source, tmp_path / "out.pdf", JobPolicy()))))
        thread.start()
        (pid,) = wait_for(lambda: render_processes(sandbox.zygote_pid or 0), HANG_GUARD_S, "a render process")
        status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":\t" in line)
        assert status["Seccomp"].strip() == "2" and int(status["Seccomp_filters"]) >= 1
        assert status["NoNewPrivs"].strip() == "1"
        os.kill(pid, signal.SIGKILL)
        thread.join(HANG_GUARD_S)


def test_a_process_that_cannot_confine_itself_never_runs_its_task(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel refusing the confinement (injected at the `confine` fault point) fails the task as a
    retryable crash before it reads its document: nothing is written to its output."""
    monkeypatch.setenv("DOCFENCE_FAULTS", "confine=fail")
    monkeypatch.setenv("DOCFENCE_FAULTS_DIR", str(tmp_path))
    source = tmp_path / "in.pdf"
    source.write_bytes(pdfs.links())
    with Sandbox() as sandbox:
        sandbox.start()
        outcome = sandbox.run(Task("watermark", source, tmp_path / "out.pdf", JobPolicy()))
    assert (outcome.ok, outcome.error_code, outcome.retryable) == (False, "render_crashed", True)
    assert "could not confine itself" in (outcome.error_message or "")
    assert (tmp_path / "out.pdf").read_bytes() == b""


def test_the_worker_warns_when_its_data_lies_where_render_processes_may_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from docfence.config import Settings
    from docfence.wiring import warn_if_data_readable_by_render

    assert readable_by_render("/usr/src/app/.venv/lib") is False  # a usual app folder is not exposed
    assert readable_by_render("/usr/share/fonts") and readable_by_render(sysconfig.get_paths()["purelib"])
    exposed = f"{sysconfig.get_paths()['purelib']}/docfence-data"
    warn_if_data_readable_by_render(Settings(database_url=f"sqlite:///{exposed}/docfence.db",
                                             storage_url=f"file://{exposed}/objects"))
    warned = [r.getMessage() for r in caplog.records if "render processes may read" in r.getMessage()]
    assert len(warned) == 3 and all(exposed in w for w in warned)  # data folder, database, blobs
    caplog.clear()
    warn_if_data_readable_by_render(Settings(database_url="sqlite:////srv/docfence/docfence.db",
                                             storage_url="file:///srv/docfence/objects"))
    assert not [r for r in caplog.records if "render processes may read" in r.getMessage()]


def test_every_render_process_of_a_sandbox_runs_confined_and_the_job_still_succeeds(tmp_path: Path) -> None:
    source = tmp_path / "in.pdf"
    source.write_bytes(pdfs.links())
    with Sandbox() as sandbox:
        sandbox.start()
        outcome = sandbox.run(Task("watermark", source, tmp_path / "out.pdf", JobPolicy()))
        assert outcome.ok, outcome
        assert outcome.process["confined"] == available()  # all that this machine can apply
        pid = outcome.process["pid"]
        # its private folder goes with it: emptied by the process, removed by the zygote that reaps it
        wait_for(lambda: not Path(private_tmp(pid)).exists(), HANG_GUARD_S, "the private folder removed")
    assert (tmp_path / "out.pdf").read_bytes().startswith(b"%PDF-")


@pytest.fixture
def fresh_rules() -> Iterator[None]:
    """The shared rules built by this test alone, and forgotten after it."""
    import docfence.sandbox.confine as confine_module

    confine_module._shared_rules.cache_clear()
    yield
    confine_module._shared_rules.cache_clear()


@pytest.mark.skipif(not FULL, reason="needs Landlock ABI 6 (Linux 6.12+) and libseccomp")
@pytest.mark.usefixtures("fresh_rules")
def test_rules_built_in_one_process_never_carry_a_plan_into_the_next(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The process that resolves the shared rules (a zygote) copies them for a plan of its own, so a
    render process forked after it starts from the shared rules alone; and a render process that took
    them for one plan (never applied) starts its next plan from fresh rules: neither reads the first
    plan's file."""
    monkeypatch.setenv("PROBE_CWD", str(tmp_path))
    first, second = tmp_path / "first.pdf", tmp_path / "second.pdf"
    first.write_bytes(b"%PDF-1.7 first tenant")
    second.write_bytes(b"%PDF-1.7 second tenant")
    probes: dict[str, object] = {"read its own input": lambda: second.read_bytes(),
                                 "read the earlier plan's input": lambda: first.read_bytes()}
    prepare()  # this process builds the shared rules
    _landlock(Confinement(read_files=(str(first),), write_files=()))  # a plan here, never applied
    seen = _confined_child(Confinement(read_files=(str(second),), write_files=()), probes)
    assert (seen["read its own input"], seen["read the earlier plan's input"]) == ("allowed", "refused")

    def taken_then_confined() -> dict[str, str]:
        _landlock(Confinement(read_files=(str(first),), write_files=()))  # in place, in this child
        applied = confine(Confinement(read_files=(str(second),), write_files=()))
        return {"abi": str(applied["landlock"]), **{k: _attempt(k, p) for k, p in probes.items()}}

    seen = in_forked_child(taken_then_confined)
    assert (seen["read its own input"], seen["read the earlier plan's input"]) == ("allowed", "refused")


@pytest.mark.skipif(not FULL, reason="needs Landlock ABI 6 (Linux 6.12+) and libseccomp")
@pytest.mark.usefixtures("fresh_rules")
def test_a_read_root_gone_since_the_rules_were_built_is_resolved_again(tmp_path: Path) -> None:
    """A folder resolved when the zygote built the shared rules and removed since (a font cache) must
    not fail every later confinement: the render process resolves the rules again, without it."""
    gone = tmp_path / "font-cache"
    gone.mkdir()
    from docfence.sandbox import confine as confine_module

    confine_module._shared_rules((str(gone),))  # built here, as a zygote builds them
    gone.rmdir()
    seen = in_forked_child(lambda: {"applied": confine(Confinement(
        read_files=(), write_files=(), read_roots=(str(gone),)))["landlock"]})
    assert seen["applied"] >= 6


def test_a_machine_without_landlock_or_seccomp_still_prepares(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare() runs in the zygote before any task: a kernel without Landlock (or a libseccomp that
    cannot compile the filter) must leave the zygote running, each task then answering for itself."""
    import docfence.sandbox.confine as confine_module

    def refuse() -> int:
        raise LandlockDisabledError("disabled at boot")

    def no_filter() -> object:
        raise ValueError("unknown syscall")

    monkeypatch.setattr(confine_module, "get_abi_version", refuse)
    monkeypatch.setattr(py_landlock.landlock, "get_abi_version", refuse)  # as the kernel would answer
    monkeypatch.setattr(confine_module, "_socket_filter", no_filter)
    confine_module._available.cache_clear()
    try:
        prepare()  # must not raise
        assert available()["landlock"] == 0
    finally:
        confine_module._available.cache_clear()
        confine_module._shared_rules.cache_clear()
