"""Deletion and retention on both stores and both artifact backends: no byte of the job remains,
downloads are refused, and the audit trail records who asked and when."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from docfence.blobs import open_blob_store
from docfence.blobs.kek.jobs import put_object
from docfence.blobs.regions import RegionRouter
from docfence.config import Settings
from docfence.core.clock import FakeClock
from docfence.core.records import ArtifactInfo
from docfence.core.states import JobState
from docfence.maintenance.deletion import DeletionService
from docfence.maintenance.reconciler import ReconcileConfig, Reconciler
from docfence.service import Principal, Service, SubmitRequest
from docfence.service.artifacts_keys import job_keys, row_key
from docfence.storage_keys import job_prefix, staging_key
from docfence.testing.blob_contract import run_moto_server

PRINCIPAL = Principal("k1", "t1", ("admin",))


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp:  # dummy credentials for the loopback S3 server only
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_CONFIG_FILE", os.devnull)
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        with run_moto_server() as endpoint:
            yield endpoint


@pytest.fixture(params=["local", "s3"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        (tmp_path / "objects").mkdir()
        return f"file://{tmp_path / 'objects'}"
    import boto3

    endpoint = request.getfixturevalue("moto_url")
    bucket = f"b{abs(hash(str(tmp_path))) % 10**8}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/docfence?endpoint_url={endpoint}&region=us-east-1"


def finished_job(store, clock: FakeClock, storage_url: str) -> tuple[Service, str]:  # type: ignore[no-untyped-def]
    settings = Settings(storage_url=storage_url)
    router = RegionRouter.from_config(settings.region_urls())
    service = Service(settings, store, router, signing_secret=b"s" * 32)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(b"%PDF-1.7 synthetic"), SubmitRequest())
    claim = store.claim("w")[0]
    key = staging_key(job.tenant, job.id, claim.attempt)
    output = b"%PDF-1.7 watermarked"
    put_object(router.for_region(job.region), key, output, job_keys(service).key_for(row_key(job)))
    store.complete(job.id, claim.attempt, "w",
                   ArtifactInfo(key, hashlib.sha256(output).hexdigest(), len(output), 1))
    router.for_region(job.region).put(staging_key(job.tenant, job.id, 9), b"stale attempt upload")
    return service, job.id


def job_objects(storage_url: str, tenant: str, job_id: str) -> list[str]:
    return list(open_blob_store(storage_url).list(job_prefix(tenant, job_id).rstrip("/")))


def test_deletion_request_removes_every_byte(store, clock: FakeClock, storage_url: str) -> None:  # type: ignore[no-untyped-def]
    service, job_id = finished_job(store, clock, storage_url)
    assert len(job_objects(storage_url, "t1", job_id)) == 3  # input, artifact, a stale attempt's object
    report = DeletionService(store, service.router).delete_job(job_id, actor="key:k1", request_id="DR-17")
    assert report.objects_deleted == 3
    assert job_objects(storage_url, "t1", job_id) == []
    job = store.get(job_id)
    assert job.deleted_at is not None and job.deletion_request_id == "DR-17"
    assert job.state is JobState.SUCCEEDED  # history stays: a deletion removes bytes, not the record
    assert store.artifact(job_id).deleted_at is not None
    with pytest.raises(Exception) as refused:
        service.artifact_url_token(PRINCIPAL, job_id)
    assert getattr(refused.value, "code", "") in ("artifact_gone", "artifact_deleted", "gone")
    events = [e for e in store.audit_events(job_id) if e.action in ("bytes_deletion", "bytes_deleted")]
    assert [(e.action, e.actor) for e in events] == [
        ("bytes_deletion", "key:k1"), ("bytes_deleted", "key:k1")]
    assert events[0].details["request_id"] == "DR-17" and events[1].details["objects"] == 3
    # idempotent
    again = DeletionService(store, service.router).delete_job(job_id, actor="x", request_id="DR-18")
    assert again.objects_deleted == 0
    assert store.get(job_id).deletion_request_id == "DR-17"


def test_retention_expiry_deletes_without_a_request(store, clock: FakeClock, storage_url: str) -> None:  # type: ignore[no-untyped-def]
    service, job_id = finished_job(store, clock, storage_url)
    reconciler = Reconciler(store, service.router, ReconcileConfig())
    assert reconciler.run_once().retention_deleted == []
    clock.advance(store.get(job_id).policy.retention_s + 1)
    assert reconciler.run_once().retention_deleted == [job_id]
    assert job_objects(storage_url, "t1", job_id) == []
    events = [e for e in store.audit_events(job_id) if e.action == "bytes_deleted"]
    assert events and events[0].actor == "retention" and events[0].reason == "retention_expired"


def test_deletion_racing_a_running_attempt_leaves_no_bytes(store, clock: FakeClock, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "o").mkdir()
    url = f"file://{tmp_path / 'o'}"
    settings = Settings(storage_url=url)
    router = RegionRouter.from_config(settings.region_urls())
    service = Service(settings, store, router, signing_secret=b"s" * 32)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(b"%PDF-1.7 synthetic"), SubmitRequest())
    claim = store.claim("w")[0]
    DeletionService(store, router).delete_job(job.id, actor="dpo", request_id="DR-1")
    assert store.get(job.id).state is JobState.CANCELED
    # the running attempt finishes afterwards: its upload lands, its commit is refused
    key = staging_key(job.tenant, job.id, claim.attempt)
    router.for_region(job.region).put(key, b"late output")
    with pytest.raises(Exception, match="no longer current"):
        store.complete(job.id, claim.attempt, "w", ArtifactInfo(key, "0" * 64, 1, 1))
    Reconciler(store, router, ReconcileConfig()).collect_orphans()
    assert job_objects(url, job.tenant, job.id) == []
