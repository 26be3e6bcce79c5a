"""Fault cases of the sandbox with real processes and real signals, on both stores: a warm render
process SIGKILLed mid-job fails its own attempt only (render_crashed, retried); a render process never
outlives `docfence watermark` or a worker killed with SIGKILL. Hang guards only, no timing asserts."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from docfence.config import load_settings
from docfence.core.states import JobState
from docfence.samples.pdfs import links
from docfence.service import Principal, Service, SubmitRequest
from docfence.testing.procs import REPO, long_budget_config, start_worker, stop, wait_for, worker_env
from docfence.testing.proctree import descendants, render_processes, running, zygotes_under
from docfence.testing.stores import temporary_pg_database
from docfence.wiring import Runtime

PRINCIPAL = Principal("test", "t1", ("admin",))
HANG_GUARD_S = 120  # generous on a shared machine: expiring means a hang, not slowness


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        with temporary_pg_database("docfence_sbfault") as url:
            yield url


def _render_process_of(parent: int) -> int:
    """The render process under `parent` (parent -> zygote -> render process), once it exists."""
    def find() -> int | None:
        for zygote in zygotes_under(parent):
            for pid in render_processes(zygote):
                return pid
        return None
    pid: int = wait_for(find, HANG_GUARD_S, "a render process")
    return pid


def test_sigkill_of_a_warm_render_process_mid_job_fails_that_attempt_only(db_url: str,
                                                                         tmp_path: Path) -> None:
    root = tmp_path / "objects"
    root.mkdir()
    # the first render process stalls mid-job (the `render` fault point) until the test kills it
    # long lease and render budget: neither may run out while a loaded machine is slow to kill it
    env = worker_env(db_url, f"file://{root}", DOCFENCE_FAULTS="render=once:sleep:3600",
                     DOCFENCE_FAULTS_DIR=str(tmp_path), DOCFENCE_LEASE_TTL_S="120",
                     **long_budget_config(tmp_path))
    rt = Runtime.open(load_settings(env=env))
    try:
        service = Service(rt.settings, rt.store, rt.regions, signing_secret=b"x" * 32)
        job, _ = service.submit(PRINCIPAL, io.BytesIO(links()), SubmitRequest())
        worker = start_worker(env, tmp_path / "w.log")
        try:
            # the fault point's marker: the render process is mid-job, stalled inside the task
            wait_for((tmp_path / "docfence-fault-render").exists, HANG_GUARD_S, "the render fault point")
            os.kill(_render_process_of(worker.pid), signal.SIGKILL)
            wait_for(lambda: rt.store.get(job.id).state.terminal, HANG_GUARD_S, "the job to end")
            assert worker.poll() is None  # the worker survived its render process
        finally:
            stop(worker)
        done = rt.store.get(job.id)
        assert done.state is JobState.SUCCEEDED, (done.last_error_code, done.last_error_message)
        attempts = rt.store.attempts(job.id)
        assert attempts[0].error_code == "render_crashed"
        assert attempts[-1].outcome == "artifact_committed" and done.attempt == 2
    finally:
        rt.close()


def test_no_render_process_outlives_a_killed_docfence_watermark(tmp_path: Path) -> None:
    src = tmp_path / "in.pdf"
    src.write_bytes(links())
    env = {**os.environ, "DOCFENCE_FAULTS": "render=sleep:3600", "DOCFENCE_FAULTS_DIR": str(tmp_path),
           "PYTHONPATH": str(REPO)}
    cli = subprocess.Popen([sys.executable, "-m", "docfence.cli", "watermark", str(src), "--out",
                            str(tmp_path / "out")], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        render = _render_process_of(cli.pid)
        tree = descendants(cli.pid)
        cli.kill()  # SIGKILL: no handler, no cleanup in the parent
        cli.wait()
        for pid in [render, *tree]:
            wait_for(lambda pid=pid: not running(pid), HANG_GUARD_S, f"process {pid} to die with its parent")
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def test_no_render_process_outlives_a_killed_worker(db_url: str, tmp_path: Path) -> None:
    root = tmp_path / "objects"
    root.mkdir()
    env = worker_env(db_url, f"file://{root}", DOCFENCE_FAULTS="render=sleep:3600",
                     DOCFENCE_FAULTS_DIR=str(tmp_path))
    rt = Runtime.open(load_settings(env=env))
    try:
        service = Service(rt.settings, rt.store, rt.regions, signing_secret=b"x" * 32)
        service.submit(PRINCIPAL, io.BytesIO(links()), SubmitRequest())
        worker = start_worker(env, tmp_path / "w.log", "--no-reconcile")
        try:
            render = _render_process_of(worker.pid)
            tree = descendants(worker.pid)
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            for pid in [render, *tree]:
                wait_for(lambda pid=pid: not running(pid), HANG_GUARD_S, f"{pid} to end")
        finally:
            stop(worker)
    finally:
        rt.close()
