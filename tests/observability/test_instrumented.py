"""The worker and reconciler feed the process metrics where things happen: claims, renders, terminal
states, lease expirations and reclaims (docfence.worker.runner and maintenance.reconciler)."""

from __future__ import annotations

import io
from pathlib import Path

from docfence.blobs.regions import RegionRouter
from docfence.core.clock import FakeClock
from docfence.maintenance import deadlines, lease_rescue
from docfence.maintenance.reconciler import ReconcileConfig, Reconciler
from docfence.observability.exposition import render_metrics
from docfence.samples import pdfs
from docfence.service import Principal, SubmitRequest, build_service
from docfence.store.base import Store, open_store
from docfence.worker import runner
from docfence.worker.runner import Worker

from .helpers import make_settings, submit, value
from .helpers import samples as parse


def _needs(module: object) -> None:
    """The instrumented modules must keep calling the metrics module; a missing import fails here."""
    assert hasattr(module, "metrics"), f"{getattr(module, '__name__', module)} no longer records metrics"


def test_worker_records_claim_render_and_terminal(tmp_path: Path) -> None:
    _needs(runner)
    settings = make_settings(tmp_path)
    store = open_store(settings.database_url)
    try:
        service = build_service(settings, store)
        principal = Principal("k", "acme", ("admin",))
        before = parse(render_metrics(None).decode())
        service.submit(principal, io.BytesIO(pdfs.many_pages(3)), SubmitRequest())
        worker = Worker(settings, store, RegionRouter.from_config(settings.region_urls()))
        assert worker.run(until_idle=True).succeeded == 1
        after = parse(render_metrics(None).decode())
    finally:
        store.close()
    delta = lambda name, **labels: value(after, name, **labels) - value(before, name, **labels)  # noqa: E731
    assert delta("docfence_claims_total", mode="vector") == 1
    assert delta("docfence_render_duration_seconds_count", mode="vector", pages="2-10", outcome="ok") == 1
    assert delta("docfence_jobs_terminal_total", state="succeeded", code="ok", mode="vector") == 1
    assert delta("docfence_job_attempts_count", state="succeeded") == 1


def test_reconciler_records_expired_leases_and_deadline_cancels(store: Store, clock: FakeClock) -> None:
    _needs(lease_rescue)
    _needs(deadlines)
    before = parse(render_metrics(None).decode())
    submit(store, lease_ttl_s=5.0, max_attempts=1)
    store.claim("dead-worker")
    submit(store, deadline_s=3.0)
    clock.advance(6)
    Reconciler(store, None, ReconcileConfig()).run_once()
    after = parse(render_metrics(None).decode())
    delta = lambda name, **labels: value(after, name, **labels) - value(before, name, **labels)  # noqa: E731
    assert delta("docfence_lease_expirations_total") == 1
    assert delta("docfence_reclaims_total", outcome="failed") == 1
    terminal, failed_code = "docfence_jobs_terminal_total", "lease_expired"
    assert delta(terminal, state="failed", code=failed_code, mode="vector") == 1
    assert delta(terminal, state="canceled", code="deadline_exceeded", mode="vector") == 1
