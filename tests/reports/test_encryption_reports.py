"""Report jobs under envelope encryption, on both stores: a report requested locally (the worker renders
it) or through a provider (the dispatcher) leaves no stored object holding %PDF or the template data's
text, downloads as the plaintext, a retry reads the sealed snapshot under its own job's key, and after a
deletion a backup of the snapshot opens under no key."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from docfence.blobs import RegionRouter, open_blob_store
from docfence.blobs.envelope import looks_sealed, open_bytes
from docfence.blobs.kek.jobs import RowKey, read_object
from docfence.config import Settings
from docfence.core.errors import BlobIntegrityError
from docfence.core.states import JobState
from docfence.maintenance.deletion import DeletionService
from docfence.reports import ReportRequests, RequestSpec
from docfence.reports.dispatcher import Dispatcher
from docfence.samples.monthly_report import sample_monthly_data
from docfence.service import Principal, Service
from docfence.storage_keys import input_key, job_prefix
from docfence.store.sqlstore import SqlStore
from docfence.testing.fake_provider import FakeProvider
from docfence.testing.judges import pdftotext
from docfence.worker.runner import Worker

from .test_dispatcher import OK, Q, dispatcher, fake, provider_pdf, sandbox  # noqa: F401  (fixtures)

MARKER = "Quillfeather Marker Clinic 7731"  # the template data's own text: plaintext at rest would show it
PRINCIPAL = Principal("k1", "acme", ("admin",))


def _request(requests_uc: ReportRequests, template: str, *, processor: str = "local",
             subject: str = "clinic-1") -> Any:
    data = {**sample_monthly_data(pages=1), "clinic": MARKER}
    spec = RequestSpec(tenant="acme", subject=subject, period="2026-01", template=template, data=data,
                       processor=processor)
    detail, _ = requests_uc.create(spec, actor="test")
    return detail


def _stored(settings: Settings, job_id: str) -> dict[str, bytes]:
    """Every object of the job, as the object store holds it (what a backup or an operator sees)."""
    raw = open_blob_store(settings.storage_url)
    return {key: raw.get(key) for key in raw.list(job_prefix("acme", job_id).rstrip("/"))}


def _assert_sealed(objects: dict[str, bytes], count: int) -> None:
    assert len(objects) == count  # the snapshot and the artifact
    for key, data in objects.items():
        assert looks_sealed(data), key
        assert b"%PDF" not in data and MARKER.encode() not in data and b"Quillfeather" not in data, key


def _downloaded(service: Service, job_id: str, tmp_path: Path, text: str = MARKER) -> bytes:
    """The artifact as a caller downloads it (the API's /v1/signed/{token} streams this)."""
    _record, presented = service.create_api_key("acme", ("admin",))
    download = service.open_signed(service.artifact_url_token(service.authenticate(presented), job_id))
    try:
        body = b"".join(download.chunks)
    finally:
        download.close()
    assert body.startswith(b"%PDF-") and hashlib.sha256(body).hexdigest() == download.sha256
    (tmp_path / "report.pdf").write_bytes(body)
    assert text in pdftotext(tmp_path / "report.pdf")  # a real reader sees the report's text
    return body


def test_a_local_report_job_is_sealed_at_rest_and_a_backup_dies_with_its_key(
        rstore: SqlStore, settings: Settings, router: RegionRouter, monthly: str, requests_uc: ReportRequests,
        tmp_path: Path) -> None:
    detail = _request(requests_uc, monthly)
    job = detail.jobs[0]
    assert job.data_key_provider == "local" and job.data_key_wrapped
    assert Worker(settings, rstore, router).run(until_idle=True).succeeded == 1
    done = rstore.get(job.id)
    assert done.state is JobState.SUCCEEDED, done.last_error_message
    objects = _stored(settings, job.id)
    _assert_sealed(objects, 2)
    service = Service(settings, rstore, router, signing_secret=b"s" * 32)
    body, artifact = _downloaded(service, job.id, tmp_path), rstore.artifact(job.id)
    assert artifact is not None and len(body) == artifact.bytes

    snapshot_key = input_key("acme", job.id)
    data_key = requests_uc.keys.key_for(RowKey.of(done))
    assert data_key is not None
    snapshot = open_bytes(objects[snapshot_key], data_key, snapshot_key)  # the control: it opens now
    assert MARKER.encode() in snapshot and hashlib.sha256(snapshot).hexdigest() == job.input_sha256

    DeletionService(rstore, router).delete_job(job.id, actor="dpo", request_id="DR-3")
    assert _stored(settings, job.id) == {}
    with pytest.raises(BlobIntegrityError, match="destroyed"):
        requests_uc.keys.key_for(RowKey.of(rstore.get(job.id)))
    other = _request(requests_uc, monthly, subject="clinic-2").jobs[0]
    other_key = requests_uc.keys.key_for(RowKey.of(other))
    assert other_key is not None
    for key, data in objects.items():  # the backup opens under no other job's key
        with pytest.raises(BlobIntegrityError):
            open_bytes(data, other_key, key)


def test_a_retry_reads_the_sealed_snapshot_into_a_job_of_its_own_key(
        rstore: SqlStore, settings: Settings, router: RegionRouter, monthly: str,
        requests_uc: ReportRequests) -> None:
    detail = _request(requests_uc, monthly)
    first = detail.jobs[0]
    Service(settings, rstore, router, signing_secret=b"s" * 32).cancel(PRINCIPAL, first.id)
    again = requests_uc.retry(detail.request.id, actor="test")
    assert again.id != first.id and again.data_key_wrapped not in (None, first.data_key_wrapped)
    assert again.input_sha256 == first.input_sha256  # the same snapshot, sealed anew
    raw = open_blob_store(settings.storage_url).get(str(again.input_key))
    assert looks_sealed(raw) and MARKER.encode() not in raw
    key = requests_uc.keys.key_for(RowKey.of(again))
    opened = read_object(router.for_region(again.region), str(again.input_key), key,
                         expected_sha256=again.input_sha256)
    assert MARKER.encode() in opened


def test_a_provider_report_job_is_sealed_at_rest_and_downloads_as_plaintext(
        rstore: SqlStore, settings: Settings, router: RegionRouter, monthly: str, requests_uc: ReportRequests,
        fake: FakeProvider, dispatcher: Dispatcher, tmp_path: Path) -> None:  # noqa: F811
    fake.next_scripts.append([Q, OK])
    job = _request(requests_uc, monthly, processor="vendor").jobs[0]
    assert job.data_key_provider == "local"
    assert dispatcher.run_once().succeeded == 1
    assert rstore.get(job.id).state is JobState.SUCCEEDED
    _assert_sealed(_stored(settings, job.id), 2)
    service = Service(settings, rstore, router, signing_secret=b"s" * 32)
    _downloaded(service, job.id, tmp_path, "Synthetic Demo Clinic")  # the fake provider's own PDF
