"""SIGTERM: the worker stops claiming, finishes the current job within the grace period, or hands the
lease back early so another worker can take it at once (real processes, real signals).

The render is held at a fault-point barrier, so which side of the grace period it ends on is set by
the test, not by how fast this machine renders; leases and the render budget are long, so neither
runs out by accident.
"""

from __future__ import annotations

import io
import signal
from pathlib import Path

from docfence.config import load_settings
from docfence.core.states import JobState
from docfence.samples.pdfs import links
from docfence.service import Principal, Service, SubmitRequest
from docfence.testing.barriers import HANG_GUARD_S, Barriers
from docfence.testing.procs import long_budget_config, start_worker, wait_for, worker_env
from docfence.wiring import Runtime


def setup(tmp_path: Path, grace_s: float) -> tuple[Runtime, str, dict[str, str]]:
    (tmp_path / "o").mkdir()
    env = worker_env(f"sqlite:///{tmp_path / 'db.sqlite'}", f"file://{tmp_path / 'o'}",
                     DOCFENCE_LEASE_TTL_S="120", DOCFENCE_SHUTDOWN_GRACE_S=str(grace_s),
                     DOCFENCE_FAULTS="render=wait:render", DOCFENCE_FAULTS_DIR=str(tmp_path),
                     **long_budget_config(tmp_path))
    rt = Runtime.open(load_settings(env=env))
    service = Service(rt.settings, rt.store, rt.regions, signing_secret=b"k" * 32)
    job, _ = service.submit(Principal("t", "t1", ("admin",)), io.BytesIO(links()), SubmitRequest())
    return rt, job.id, env


def test_sigterm_hands_the_lease_back_when_the_render_outlasts_the_grace(tmp_path: Path) -> None:
    rt, job_id, env = setup(tmp_path, grace_s=1)
    worker = start_worker(env, tmp_path / "w.log", "--no-reconcile")
    try:
        Barriers(tmp_path).wait_reached("render")  # and it is never released: it outlasts any grace
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=HANG_GUARD_S) == 0
    finally:
        Barriers(tmp_path).release("render")
        worker.kill()
    job = rt.store.get(job_id)
    assert job.state is JobState.QUEUED and job.lease_owner is None  # no waiting for lease expiry
    assert [a.outcome for a in rt.store.attempts(job_id)] == ["lease_released"]


def test_sigterm_lets_a_render_that_ends_within_the_grace_finish(tmp_path: Path) -> None:
    rt, job_id, env = setup(tmp_path, grace_s=HANG_GUARD_S)
    worker = start_worker(env, tmp_path / "w.log", "--no-reconcile")
    try:
        Barriers(tmp_path).wait_reached("render")
        worker.send_signal(signal.SIGTERM)
        wait_for(lambda: "no more claims" in (tmp_path / "w.log").read_text(), HANG_GUARD_S, "SIGTERM seen")
        Barriers(tmp_path).release("render")  # the render ends after the signal, within the grace
        assert worker.wait(timeout=HANG_GUARD_S) == 0
    finally:
        Barriers(tmp_path).release("render")
        worker.kill()
    assert rt.store.get(job_id).state is JobState.SUCCEEDED
    assert [a.outcome for a in rt.store.attempts(job_id)] == ["artifact_committed"]
