"""/metrics after a mixed run (succeeded, failed, canceled, reclaimed, expired, past deadline): every
signal the runbook lists, with the right counts and labels; multi-process aggregation; the per-process
server."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import httpx

from docfence.core.clock import FakeClock
from docfence.core.records import ArtifactInfo, Claim, Job
from docfence.observability import metrics
from docfence.observability.exposition import render_metrics, serve_metrics
from docfence.store.base import Store
from docfence.testing.servers import running

from .helpers import Samples, console_app, make_settings, samples, submit, value

_REPORT = {"ok": False, "mode": "raster", "checks": [{"name": "page_count", "ok": False},
                                                     {"name": "watermark", "ok": False},
                                                     {"name": "second_reader", "ok": True}]}


def _claim(store: Store, worker: str) -> Claim:
    [claim] = store.claim(worker)
    metrics.record_claimed(claim.job.mode)
    return claim


def _commit(store: Store, worker: str, pages: int) -> Job:
    """Play the worker at the points the worker records: claim, render, fenced commit."""
    claim = _claim(store, worker)
    metrics.record_render(claim.job.mode, pages, 0.4)
    data = b"%PDF-1.4 out"
    info = ArtifactInfo(f"jobs/{claim.job.tenant}/{claim.job.id}/attempts/{claim.attempt}/output.pdf",
                        hashlib.sha256(data).hexdigest(), len(data), pages, {"ok": True, "checks": []})
    job = store.complete(claim.job.id, claim.attempt, worker, info)
    metrics.record_terminal(job)
    return job


def _mixed_run(store: Store, clock: FakeClock) -> dict[str, Job]:
    jobs = {"a": submit(store)}
    _commit(store, "w1", pages=3)  # succeeded on attempt 1
    jobs["b"] = submit(store, mode="raster")
    claim = _claim(store, "w1")
    metrics.record_render("raster", 30, 2.0, ok=False)
    metrics.record_validation_report(_REPORT, "raster")
    failed = store.fail(claim.job.id, claim.attempt, "w1", "validation_failed", "fidelity", retryable=False)
    metrics.record_terminal(failed)
    metrics.record_terminal(store.cancel(submit(store).id, actor="key:test"))  # canceled while queued
    jobs["d"] = submit(store, lease_ttl_s=5.0)
    _claim(store, "w-dead")  # this worker dies: its lease expires and the reconciler takes the job back
    clock.advance(6)
    expired = store.requeue_expired()  # play the reconciler (the real one records the same calls)
    metrics.record_reconcile(sum(not j.terminal for j in expired), sum(j.terminal for j in expired))
    clock.advance(10)  # past the retry backoff
    jobs["d"] = _commit(store, "w2", pages=250)  # succeeded on attempt 2
    jobs["f"] = submit(store)
    _claim(store, "w3")  # f: rendering with a valid lease
    jobs["g"] = submit(store, lease_ttl_s=5.0)
    _claim(store, "w-gone")  # g: its lease will have expired at scrape time, not yet reclaimed
    jobs["e"] = submit(store, deadline_s=5.0)  # e: queued, past its deadline at scrape time
    clock.advance(10)
    store.pause_claims("raster", actor="test")
    metrics.record_provider_poll("succeeded")
    metrics.record_provider_poll("provider_unavailable")
    metrics.record_provider_observation("running")
    return jobs


def _delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_metrics_after_a_mixed_run(store: Store, clock: FakeClock, tmp_path: Path) -> None:
    before = samples(render_metrics(None).decode())  # process counters are global: compare deltas
    jobs = _mixed_run(store, clock)
    app, _ = console_app(make_settings(tmp_path), store, clock)
    with running(app) as url:
        resp = httpx.get(f"{url}/metrics", timeout=30)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    after = samples(resp.text)
    d = lambda name, **labels: _delta(after, before, name, **labels)  # noqa: E731
    # terminal outcome by state and code; attempts per job at terminal
    assert d("docfence_jobs_terminal_total", state="succeeded", code="ok", mode="vector") == 2
    assert d("docfence_jobs_terminal_total", state="failed", code="validation_failed", mode="raster") == 1
    assert d("docfence_jobs_terminal_total", state="canceled", code="canceled", mode="vector") == 1
    assert d("docfence_job_attempts_count", state="succeeded") == 2
    assert d("docfence_job_attempts_sum", state="succeeded") == 3  # attempts 1 and 2
    assert d("docfence_job_attempts_bucket", state="succeeded", le="1.0") == 1
    assert d("docfence_job_time_to_terminal_seconds_count", state="succeeded", mode="vector") == 2
    # render duration by mode and page-count bucket
    assert d("docfence_render_duration_seconds_count", mode="vector", pages="2-10", outcome="ok") == 1
    assert d("docfence_render_duration_seconds_count", mode="vector", pages="201+", outcome="ok") == 1
    assert d("docfence_render_duration_seconds_count", mode="raster", pages="11-50", outcome="error") == 1
    assert d("docfence_render_duration_seconds_sum", mode="raster", pages="11-50", outcome="error") == 2.0
    # lease expirations and reclaims; fidelity-validation failures by check; provider polls; claims
    assert d("docfence_lease_expirations_total") == 1
    assert d("docfence_reclaims_total", outcome="requeued") == 1
    assert d("docfence_validation_failures_total", check="page_count", mode="raster") == 1
    assert d("docfence_validation_failures_total", check="watermark", mode="raster") == 1
    assert d("docfence_validation_failures_total", check="second_reader", mode="raster") == 0
    assert d("docfence_provider_polls_total", outcome="provider_unavailable") == 1
    assert d("docfence_provider_observations_total", kind="running") == 1
    assert d("docfence_claims_total", mode="vector") == 5 and d("docfence_claims_total", mode="raster") == 1
    _check_store_gauges(after, jobs)


def _check_store_gauges(after: Samples, jobs: dict[str, Job]) -> None:
    """Queue depth and job age by state, deadlines, leases and pauses: read from the store at scrape."""
    assert value(after, "docfence_store_up") == 1
    expected = {"queued": 1, "rendering": 2, "succeeded": 2, "failed": 1, "canceled": 1}
    for state, n in expected.items():
        assert value(after, "docfence_jobs", state=state) == n, state
    assert value(after, "docfence_job_oldest_age_seconds", state="queued") == 10
    assert value(after, "docfence_job_oldest_age_seconds", state="rendering") == 10
    assert value(after, "docfence_job_age_seconds_gcount", state="rendering") == 2
    assert value(after, "docfence_job_age_seconds_bucket", state="rendering", le="5.0") == 0
    assert value(after, "docfence_job_age_seconds_bucket", state="rendering", le="15.0") == 2
    assert value(after, "docfence_jobs_past_deadline", state="queued") == 1
    assert value(after, "docfence_job_max_overdue_seconds", state="queued") == 5
    assert value(after, "docfence_jobs_past_deadline", state="rendering") == 0
    assert value(after, "docfence_leases_valid", mode="vector") == 1  # f; g's lease expired
    assert value(after, "docfence_leases_expired") == 1
    assert value(after, "docfence_claims_paused", scope="raster") == 1
    assert jobs["d"].attempt == 2 and jobs["d"].state.value == "succeeded"


_CHILD = """
import sys
from docfence.observability import metrics
assert metrics.multiprocess_enabled()
metrics.record_lease_expired(2)
metrics.record_render("vector", 3, 0.5)
"""
_SCRAPE = "from docfence.observability.exposition import render_metrics; print(render_metrics(None).decode())"


def test_multiprocess_mode_aggregates_every_worker_process(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):  # two worker processes, then the API process scrapes them all
        subprocess.run([sys.executable, "-c", _CHILD], env=env, check=True, timeout=60)
    out = subprocess.run([sys.executable, "-c", _SCRAPE], env=env, check=True, timeout=60,
                         capture_output=True, text=True).stdout
    found = samples(out)
    assert value(found, "docfence_lease_expirations_total") == 4
    assert value(found, "docfence_render_duration_seconds_count", mode="vector", pages="2-10",
                 outcome="ok") == 2


def test_worker_metrics_port_serves_process_and_store_metrics(store: Store) -> None:
    submit(store)
    server = serve_metrics(0, store)
    try:
        resp = httpx.get(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10)
    finally:
        server.shutdown()
        server.server_close()
    found = samples(resp.text)
    assert value(found, "docfence_jobs", state="queued") == 1
    assert ("docfence_lease_expirations_total", frozenset()) in found


def test_labels_stay_bounded() -> None:
    assert [metrics.page_bucket(n) for n in (0, 1, 2, 10, 11, 50, 51, 200, 201, 5000)] == [
        "unknown", "1", "2-10", "2-10", "11-50", "11-50", "51-200", "51-200", "201+", "201+"]
    assert metrics.failed_checks({"checks": [{"name": "a", "ok": True}, {"name": "b", "ok": False}]}) == ["b"]
    assert metrics._label("x" * 100 + "<script>") == "x" * 48
    assert metrics._mode("hologram") == "other"
