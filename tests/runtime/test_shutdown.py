"""SIGTERM: the worker stops claiming, finishes the current job within the grace period, or hands the
lease back early so another worker can take it at once (real processes, real signals)."""

from __future__ import annotations

import io
import signal
from pathlib import Path

from docfence.config import load_settings
from docfence.core.states import JobState
from docfence.engines.samples import links
from docfence.runtime import Runtime
from docfence.service import Principal, Service, SubmitRequest
from docfence.testing.procs import start_worker, wait_for, worker_env


def setup(tmp_path: Path, render_sleep: float) -> tuple[Runtime, str, dict[str, str]]:
    (tmp_path / "o").mkdir()
    env = worker_env(f"sqlite:///{tmp_path / 'db.sqlite'}", f"file://{tmp_path / 'o'}",
                     DOCFENCE_SHUTDOWN_GRACE_S="2", DOCFENCE_FAULTS=f"render=sleep:{render_sleep}")
    rt = Runtime.open(load_settings(env=env))
    service = Service(rt.settings, rt.store, rt.regions, signing_secret=b"k" * 32)
    job, _ = service.submit(Principal("t", "t1", ("admin",)), io.BytesIO(links()), SubmitRequest())
    return rt, job.id, env


def test_sigterm_hands_the_lease_back_when_the_render_outlasts_the_grace(tmp_path: Path) -> None:
    rt, job_id, env = setup(tmp_path, render_sleep=30)
    worker = start_worker(env, tmp_path / "w.log", "--no-reconcile")
    wait_for(lambda: rt.store.get(job_id).state is JobState.RENDERING, 30, "a claim")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
    job = rt.store.get(job_id)
    assert job.state is JobState.QUEUED and job.lease_owner is None  # no waiting for lease expiry
    assert [a.outcome for a in rt.store.attempts(job_id)] == ["lease_released"]


def test_sigterm_lets_a_short_render_finish(tmp_path: Path) -> None:
    rt, job_id, env = setup(tmp_path, render_sleep=0.5)
    worker = start_worker(env, tmp_path / "w.log", "--no-reconcile")
    wait_for(lambda: rt.store.get(job_id).state is JobState.RENDERING, 30, "a claim")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
    assert rt.store.get(job_id).state is JobState.SUCCEEDED
