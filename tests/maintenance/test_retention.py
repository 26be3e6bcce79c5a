"""Retention on both stores, driven by the fake clock: once a terminal job's retention expires its
bytes are deleted and its row stays as a tombstone; an active job and a job within retention keep
theirs."""

from __future__ import annotations

import io
from pathlib import Path

from docfence.blobs.regions import RegionRouter
from docfence.config import Settings
from docfence.core.clock import FakeClock
from docfence.maintenance.batch import BatchConfig
from docfence.maintenance.retention import RetentionEnforcer
from docfence.service import Principal, Service, SubmitRequest
from docfence.storage_keys import job_prefix
from docfence.store.base import Store

PRINCIPAL = Principal("k1", "t1", ("admin",))
PDF = b"%PDF-1.7 synthetic"


def test_expired_retention_deletes_bytes_and_keeps_the_tombstone(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    settings = Settings(storage_url=f"file://{tmp_path / 'objects'}")
    router = RegionRouter.from_config(settings.region_urls())
    service = Service(settings, store, router, signing_secret=b"s" * 32)
    ended, _ = service.submit(PRINCIPAL, io.BytesIO(PDF), SubmitRequest())
    store.cancel(ended.id, actor="test")
    active, _ = service.submit(PRINCIPAL, io.BytesIO(PDF + b" 2"), SubmitRequest())
    blobs = router.for_region("local")
    retention = RetentionEnforcer(store, router, BatchConfig())
    assert retention.run_once() == []  # within retention
    clock.advance(ended.policy.retention_s + 1)
    assert retention.run_once() == [ended.id]
    assert list(blobs.list(job_prefix("t1", ended.id).rstrip("/"))) == []
    assert store.get(ended.id).deleted_at is not None  # the row stays, as a tombstone
    assert list(blobs.list(job_prefix("t1", active.id).rstrip("/")))  # not terminal: kept
    assert retention.run_once() == []  # idempotent
