"""Staging garbage collection on both stores, driven by the fake clock: an ended attempt's object is
kept for the configured grace and collected after it, and a sweep covers every object however many
batches that takes (a single pass stays bounded)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from docfence.blobs.regions import RegionRouter
from docfence.config import Settings, load_settings
from docfence.core.clock import FakeClock
from docfence.core.errors import ConfigError, DocfenceError
from docfence.core.records import ArtifactInfo
from docfence.maintenance.reconciler import ReconcileConfig, Reconciler
from docfence.service import Principal, Service, SubmitRequest
from docfence.storage_keys import staging_key
from docfence.store.base import Store
from docfence.wiring import Runtime

PRINCIPAL = Principal("k1", "t1", ("admin",))


def _service(store: Store, tmp_path: Path) -> Service:
    (tmp_path / "objects").mkdir(exist_ok=True)
    settings = Settings(storage_url=f"file://{tmp_path / 'objects'}")
    router = RegionRouter.from_config(settings.region_urls())
    return Service(settings, store, router, signing_secret=b"s" * 32)


def _stage(service: Service, tenant: str, job_id: str, attempt: int) -> ArtifactInfo:
    key = staging_key(tenant, job_id, attempt)
    info = service.router.for_region("local").put(key, b"%%PDF-1.7 attempt %d" % attempt)
    return ArtifactInfo(key, info.sha256, info.bytes, 1)


def _keys(service: Service) -> set[str]:
    return set(service.router.for_region("local").list("jobs"))


def test_an_ended_attempts_object_is_kept_for_the_grace_then_collected(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    service = _service(store, tmp_path)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(b"%PDF-1.7 synthetic"), SubmitRequest())
    first = store.claim("w1")[0]
    stale = _stage(service, job.tenant, job.id, first.attempt)
    clock.advance(job.policy.lease_ttl_s + 1)  # the first worker vanished: its lease expires
    assert [j.id for j in store.requeue_expired()] == [job.id]
    second = store.claim("w2")[0]
    current = _stage(service, job.tenant, job.id, second.attempt)
    gc = Reconciler(store, service.router, ReconcileConfig(staging_grace_s=10))

    clock.advance(9)
    assert gc.sweep_orphans() == []  # attempt 1 ended 9 s ago: its worker may still be at it
    clock.advance(2)
    assert gc.sweep_orphans() == [stale.key]
    assert current.key in _keys(service)  # the running attempt's object is never an orphan
    store.complete(job.id, second.attempt, "w2", current)
    clock.advance(3600)
    assert gc.sweep_orphans() == [] and current.key in _keys(service)


def test_a_sweep_covers_every_object_while_one_pass_stays_bounded(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    service = _service(store, tmp_path)
    orphans = set()
    for _ in range(5):  # each: input, committed artifact, and a leftover of an older attempt
        job, _ = service.submit(PRINCIPAL, io.BytesIO(b"%PDF-1.7 synthetic"), SubmitRequest())
        claim = store.claim("w")[0]
        store.complete(job.id, claim.attempt, "w", _stage(service, job.tenant, job.id, claim.attempt))
        orphans.add(_stage(service, job.tenant, job.id, 7).key)
    clock.advance(1)
    keep = _keys(service) - orphans
    gc = Reconciler(store, service.router, ReconcileConfig(gc_batch=4, staging_grace_s=0))
    assert len(gc.collect_orphans()) <= 4  # one pass examines at most gc_batch objects
    gc.sweep_orphans()
    assert _keys(service) == keep


def test_a_negative_grace_is_refused(store: Store, tmp_path: Path) -> None:
    with pytest.raises(DocfenceError):
        Reconciler(store, None, ReconcileConfig(staging_grace_s=-1))


def test_the_grace_comes_from_settings_and_a_bad_one_fails_at_start_up(tmp_path: Path) -> None:
    env = {"DOCFENCE_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
           "DOCFENCE_STORAGE_URL": f"file://{tmp_path / 'objects'}", "DOCFENCE_STAGING_GRACE_S": "7.5"}
    rt = Runtime.open(load_settings(env=env))
    try:
        assert rt.reconciler().config.staging_grace_s == 7.5
    finally:
        rt.close()
    with pytest.raises(ConfigError):
        load_settings(env={**env, "DOCFENCE_STAGING_GRACE_S": "-1"})
