"""Envelope encryption on both stores and both blob backends, through the service and a real worker: no
stored object holds a byte of the document in clear, the download is the plaintext (its sha256 the one
the job names), a backup taken before a deletion cannot be opened afterwards, and a job stored before
encryption (no key provider on its row) is still read as plaintext."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from docfence.blobs import open_blob_store
from docfence.blobs.envelope import looks_sealed, open_bytes
from docfence.blobs.kek.jobs import JobKeys, RowKey
from docfence.blobs.kek.local import LocalKeyProvider
from docfence.blobs.regions import RegionRouter
from docfence.config import Settings, WorkerConfig, load_settings
from docfence.core.errors import BlobError, BlobIntegrityError, ConfigError
from docfence.core.ids import new_id
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob, key_fingerprint
from docfence.core.states import JobState
from docfence.maintenance.deletion import DeletionService
from docfence.samples.pdfs import SampleBuilder
from docfence.service import Principal, Service, SubmitRequest
from docfence.storage_keys import input_key, job_prefix
from docfence.testing.blob_contract import run_moto_server
from docfence.testing.judges import pdftotext
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.worker.outages import Backoff
from docfence.worker.runner import Worker

PRINCIPAL = Principal("k1", "t1", ("admin",))
SECRET_TEXT = "Patient Zebulon Quartermain 0423-77"  # the document's own text


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
    bucket = f"enc{abs(hash(str(tmp_path))) % 10**8}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/docfence?endpoint_url={endpoint}&region=us-east-1"


def _document() -> bytes:
    """A PDF whose text sits uncompressed in its content stream: plaintext in storage would show it."""
    builder = SampleBuilder()
    builder.page([SECRET_TEXT, "Diagnosis: confidential"])
    buf = io.BytesIO()
    builder.pdf.save(buf, compress_streams=False, deterministic_id=True)
    data = buf.getvalue()
    assert SECRET_TEXT.encode() in data  # the judge below could see it
    return data


def _setup(store: Any, tmp_path: Path, storage_url: str) -> tuple[Service, Worker, JobKeys]:
    settings = Settings(storage_url=storage_url, limits=LONG_BUDGET_LIMITS,
                        worker=WorkerConfig(poll_interval_s=3600.0, reconcile_in_process=False))
    router = RegionRouter.from_config(settings.region_urls())
    keys = JobKeys(settings.encryption, None, provider=LocalKeyProvider(tmp_path / "keys" / "kek.key"))
    service = Service(settings, store, router, signing_secret=b"s" * 32)
    service.job_keys = keys  # type: ignore[attr-defined]
    return service, Worker(settings, store, router, job_keys=keys), keys


def _stored(storage_url: str, tenant: str, job_id: str) -> dict[str, bytes]:
    """Every object of the job, as the object store holds it (what a backup or an operator sees)."""
    raw = open_blob_store(storage_url)
    return {key: raw.get(key) for key in raw.list(job_prefix(tenant, job_id).rstrip("/"))}


def _download(service: Service, job_id: str) -> tuple[bytes, Any]:
    """The artifact as a caller downloads it (the API's /v1/signed/{token} streams this)."""
    _record, presented = service.create_api_key("t1", ("admin",))
    principal = service.authenticate(presented)
    download = service.open_signed(service.artifact_url_token(principal, job_id))
    try:
        return b"".join(download.chunks), download
    finally:
        download.close()


def test_no_plaintext_at_rest_the_download_is_the_plaintext_and_deletion_holds_for_a_backup(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, storage_url: str) -> None:
    service, worker, keys = _setup(store, tmp_path, storage_url)
    document = _document()
    job, _ = service.submit(PRINCIPAL, io.BytesIO(document), SubmitRequest())
    assert job.data_key_provider == "local" and job.data_key_wrapped
    assert job.input_sha256 == hashlib.sha256(document).hexdigest()  # the plaintext's, not the object's
    assert worker.run(until_idle=True).succeeded == 1
    done = store.get(job.id)
    assert done.state is JobState.SUCCEEDED, done.last_error_message

    objects = _stored(storage_url, job.tenant, job.id)
    assert len(objects) == 2  # the input and the artifact
    for key, data in objects.items():
        assert b"%PDF" not in data and SECRET_TEXT.encode() not in data, key
        assert b"Quartermain" not in data and looks_sealed(data), key

    artifact = store.artifact(job.id)
    body, download = _download(service, job.id)
    assert body.startswith(b"%PDF-") and len(body) == download.size == artifact.bytes
    assert hashlib.sha256(body).hexdigest() == download.sha256 == artifact.sha256
    (tmp_path / "out.pdf").write_bytes(body)
    assert SECRET_TEXT in pdftotext(tmp_path / "out.pdf")  # a real reader opens the plaintext

    backup, dump = dict(objects), store.get(job.id)  # a copy of the objects and of the row, before
    data_key = keys.key_for(_row(dump))
    assert data_key is not None
    assert open_bytes(backup[input_key(job.tenant, job.id)], data_key,
                      input_key(job.tenant, job.id)) == document  # the control: the backup opens now

    DeletionService(store, service.router).delete_job(job.id, actor="dpo", request_id="DR-9")
    assert _stored(storage_url, job.tenant, job.id) == {}
    after = store.get(job.id)
    assert after.deleted_at is not None and after.data_key_wrapped is None
    assert after.data_key_provider == "local" and after.data_key_kek_id == dump.data_key_kek_id
    with pytest.raises(BlobIntegrityError, match="destroyed"):  # the restored dump has no key any more
        keys.key_for(_row(after))
    for key, data in backup.items():  # and without it no object opens, under any other key
        other = keys.key_for(_row(_resubmitted(service)))
        assert other is not None
        with pytest.raises(BlobIntegrityError):
            open_bytes(data, other, key)
    event = next(e for e in store.audit_events(job.id) if e.action == "bytes_deletion")
    assert event.details["key_destroyed"] is True
    assert event.details["kek_fingerprint"] == key_fingerprint("local", str(dump.data_key_kek_id))
    assert str(dump.data_key_wrapped) not in repr(event.details)


def _row(job: Any) -> RowKey:
    return RowKey(job.tenant, job.id, job.data_key_provider, job.data_key_kek_id, job.data_key_wrapped)


def _resubmitted(service: Service) -> Any:
    job, _ = service.submit(PRINCIPAL, io.BytesIO(_document()), SubmitRequest(label="another"))
    return job


def test_a_job_stored_before_encryption_is_read_as_plaintext(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, storage_url: str) -> None:
    """A row with no key provider (written by the release before): its plaintext input is rendered and
    its output kept plaintext, as the row says; nothing about the bytes decides."""
    service, worker, _keys = _setup(store, tmp_path, storage_url)
    document = _document()
    policy: JobPolicy = service.settings.policy_for("default")
    blobs = service.router.for_region(policy.region)
    job_id = new_id()
    info = blobs.put(input_key("t1", job_id), document)
    job, _ = store.submit(NewJob(tenant="t1", policy=policy, input_key=info.key, input_sha256=info.sha256,
                                 input_bytes=info.bytes, job_id=job_id))
    assert job.data_key_provider is None
    assert worker.run(until_idle=True).succeeded == 1
    body, download = _download(service, job_id)
    assert body.startswith(b"%PDF-") and hashlib.sha256(body).hexdigest() == download.sha256
    assert blobs.get(store.artifact(job_id).key).startswith(b"%PDF-")  # never sealed behind its back


class _FlakyKeyService:
    """The local provider behind a key service that is unreachable for its first `down` unwraps."""

    def __init__(self, inner: LocalKeyProvider, down: int) -> None:
        self.inner, self.down, self.unwraps = inner, down, 0
        self.name = inner.name

    def current_key_id(self) -> str:
        return self.inner.current_key_id()

    def generate(self, context: Any) -> Any:
        return self.inner.generate(context)

    def wrap(self, key: Any, context: Any) -> Any:
        return self.inner.wrap(key, context)

    def unwrap(self, wrapped: Any, context: Any) -> Any:
        self.unwraps += 1
        if self.unwraps <= self.down:
            raise BlobError("injected: the key service is unreachable")
        return self.inner.unwrap(wrapped, context)


def test_a_key_service_outage_is_retried_without_spending_an_attempt(  # type: ignore[no-untyped-def]
        store, tmp_path: Path) -> None:
    (tmp_path / "objects").mkdir()
    service, _worker, keys = _setup(store, tmp_path, f"file://{tmp_path / 'objects'}")
    job, _ = service.submit(PRINCIPAL, io.BytesIO(_document()), SubmitRequest())
    flaky = _FlakyKeyService(LocalKeyProvider(tmp_path / "keys" / "kek.key"), down=2)
    worker = Worker(service.settings, store, service.router, backoff=Backoff(first_s=0.001, cap_s=0.004),
                    job_keys=JobKeys(keys.config, None, provider=flaky))
    assert worker.run(until_idle=True).succeeded == 1
    done = store.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.attempt == 1, done.last_error_code
    assert flaky.unwraps == 3 and [a.outcome for a in store.attempts(job.id)] == ["artifact_committed"]


def test_sealing_new_jobs_can_be_held_back_for_a_rolling_upgrade(  # type: ignore[no-untyped-def]
        store, tmp_path: Path) -> None:
    """With seal_new_jobs off (workers of the release before still run) a new job's row names no key
    provider and its input is stored as the old workers read it; reading sealed jobs is unaffected."""
    assert load_settings(env={"DOCFENCE_SEAL_NEW_JOBS": "false"}).encryption.seal_new_jobs is False
    assert load_settings(env={}).encryption.seal_new_jobs is True
    with pytest.raises(ConfigError, match="DOCFENCE_SEAL_NEW_JOBS"):
        load_settings(env={"DOCFENCE_SEAL_NEW_JOBS": "maybe"})
    (tmp_path / "objects").mkdir()
    service, _worker, keys = _setup(store, tmp_path, f"file://{tmp_path / 'objects'}")
    sealed, _ = service.submit(PRINCIPAL, io.BytesIO(_document()), SubmitRequest(label="before"))
    service.job_keys = JobKeys(replace(keys.config, seal_new_jobs=False), None,  # type: ignore[attr-defined]
                               provider=keys.provider)
    plain, _ = service.submit(PRINCIPAL, io.BytesIO(_document()), SubmitRequest(label="during"))
    assert plain.data_key_provider is None and sealed.data_key_provider == "local"
    raw = open_blob_store(f"file://{tmp_path / 'objects'}")
    assert raw.get(str(plain.input_key)) == _document()
    assert looks_sealed(raw.get(str(sealed.input_key)))
    assert Worker(service.settings, store, service.router, job_keys=service.job_keys  # type: ignore[attr-defined]
                  ).run(until_idle=True).succeeded == 2
