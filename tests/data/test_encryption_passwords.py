"""PDF passwords under envelope encryption, on both stores, through the service and a real worker: a new
job's password is sealed under the job's own data key (not password.key), reaches the render process,
and once the job is deleted a backup of the sealed password opens under no key, password.key included;
a job from before (no key provider on its row, a Fernet-sealed password) is still read with password.key."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from cryptography.fernet import Fernet, InvalidToken

from docfence.blobs.envelope import looks_sealed, open_bytes
from docfence.blobs.kek.jobs import JobKeys
from docfence.blobs.kek.local import LocalKeyProvider
from docfence.blobs.regions import RegionRouter
from docfence.blobs.sealed import PasswordSeal, load_key, open_under, password_key
from docfence.config import Settings, WorkerConfig
from docfence.core.errors import BlobError, BlobIntegrityError
from docfence.core.ids import new_id
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.core.states import JobState
from docfence.maintenance.deletion import DeletionService
from docfence.samples import pdfs
from docfence.service import Principal, Service, SubmitRequest
from docfence.service.artifacts_keys import row_key
from docfence.storage_keys import input_key, job_prefix
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.worker.runner import Worker

PRINCIPAL = Principal("k1", "t1", ("admin",))
PASSWORD = "Zebulon-\u00e9-0423-unseal-me"  # distinctive: a plain search finds any copy in clear


def _locked() -> bytes:
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(1)))
    out = io.BytesIO()
    pdf.save(out, encryption=pikepdf.Encryption(owner="o-" + PASSWORD, user=PASSWORD, R=6))
    return out.getvalue()


def _setup(store: Any, tmp_path: Path) -> tuple[Service, Worker, JobKeys]:
    (tmp_path / "objects").mkdir()
    settings = Settings(storage_url=f"file://{tmp_path / 'objects'}", limits=LONG_BUDGET_LIMITS,
                        password_key=Fernet.generate_key().decode("ascii"),
                        worker=WorkerConfig(poll_interval_s=3600.0, reconcile_in_process=False))
    router = RegionRouter.from_config(settings.region_urls())
    keys = JobKeys(settings.encryption, None, provider=LocalKeyProvider(tmp_path / "keys" / "kek.key"))
    service = Service(settings, store, router, signing_secret=b"s" * 32)
    service.job_keys = keys
    return service, Worker(settings, store, router, job_keys=keys), keys


def _rendered(service: Service, job_id: str, tmp_path: Path) -> None:
    """The job's download opens with its password (the render process had it) and is encrypted."""
    artifact = service.store.artifact(job_id)
    assert artifact is not None
    data_key = service.job_keys.key_for(row_key(service.store.get(job_id)))
    raw = service.router.for_region("local").get(artifact.key)
    body = raw if data_key is None else open_bytes(raw, data_key, artifact.key)
    (tmp_path / "out.pdf").write_bytes(body)
    with pikepdf.open(tmp_path / "out.pdf", password=PASSWORD) as pdf:
        assert pdf.is_encrypted and len(pdf.pages) == 1
    with pytest.raises(pikepdf.PasswordError):
        pikepdf.open(tmp_path / "out.pdf")


def test_a_new_jobs_password_is_sealed_under_its_data_key_and_a_backup_dies_with_it(  # type: ignore[no-untyped-def]
        store, tmp_path: Path) -> None:
    service, worker, keys = _setup(store, tmp_path)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(_locked()), SubmitRequest(password=PASSWORD))
    assert job.sealed_password and job.data_key_provider == "local"
    blobs, prefix = service.router.for_region("local"), job_prefix(job.tenant, job.id)
    backup = blobs.get(password_key(prefix))  # what a backup of the object store holds
    assert looks_sealed(backup) and PASSWORD.encode() not in backup
    fernet = Fernet(load_key(service.settings))
    with pytest.raises(InvalidToken):  # not sealed by password.key: only the job's key opens it
        fernet.decrypt(backup)
    data_key = keys.key_for(row_key(job))
    assert data_key is not None and open_under(backup, data_key, prefix) == PASSWORD  # the control

    assert worker.run(until_idle=True).succeeded == 1
    assert store.get(job.id).state is JobState.SUCCEEDED
    _rendered(service, job.id, tmp_path)

    DeletionService(store, service.router).delete_job(job.id, actor="dpo", request_id="DR-7")
    assert not blobs.exists(password_key(prefix))
    after = store.get(job.id)
    with pytest.raises(BlobIntegrityError, match="destroyed"):  # a restored database has no key
        keys.key_for(row_key(after))
    with pytest.raises(InvalidToken):  # password.key, still present, does not open the backup
        fernet.decrypt(backup)
    with pytest.raises(BlobError):
        PasswordSeal(load_key(service.settings)).open(backup)
    other, _ = service.submit(PRINCIPAL, io.BytesIO(_locked()), SubmitRequest(password=PASSWORD))
    other_key = keys.key_for(row_key(other))
    assert other_key is not None
    with pytest.raises(BlobIntegrityError):  # nor does any other job's data key
        open_under(backup, other_key, prefix)


def test_a_job_from_before_reads_its_fernet_sealed_password_with_password_key(  # type: ignore[no-untyped-def]
        store, tmp_path: Path) -> None:
    """No key provider on the row (the release before wrote it): plaintext input, a Fernet-sealed
    password; the worker reads both as the row says and renders with the password."""
    service, worker, _keys = _setup(store, tmp_path)
    policy: JobPolicy = service.settings.policy_for("default")
    blobs, job_id = service.router.for_region(policy.region), new_id()
    info = blobs.put(input_key("t1", job_id), _locked())
    PasswordSeal(load_key(service.settings)).seal(blobs, job_prefix("t1", job_id), PASSWORD)
    job, _ = store.submit(NewJob(tenant="t1", policy=policy, input_key=info.key, input_sha256=info.sha256,
                                 input_bytes=info.bytes, job_id=job_id, sealed_password=True))
    assert job.data_key_provider is None and job.sealed_password
    assert worker.run(until_idle=True).succeeded == 1
    _rendered(service, job_id, tmp_path)
    artifact = store.artifact(job_id)
    assert artifact is not None and blobs.get(artifact.key).startswith(b"%PDF-")  # plaintext, as the row says


def test_a_new_job_needs_no_password_key(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A worker whose password.key differs (or would be refused) still opens a new job's password: the
    job's data key is all it takes."""
    service, _worker, keys = _setup(store, tmp_path)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(_locked()), SubmitRequest(password=PASSWORD))
    settings = Settings(storage_url=service.settings.storage_url, limits=LONG_BUDGET_LIMITS,
                        password_key="not-a-fernet-key",
                        worker=WorkerConfig(poll_interval_s=3600.0, reconcile_in_process=False))
    router = RegionRouter.from_config(settings.region_urls())
    assert Worker(settings, store, router, job_keys=keys).run(until_idle=True).succeeded == 1
    _rendered(service, job.id, tmp_path)


def test_a_tampered_sealed_password_fails_the_job_without_a_retry(  # type: ignore[no-untyped-def]
        store, tmp_path: Path) -> None:
    """One flipped byte in the sealed password: the chunk fails authentication, the job fails with
    object_integrity (deterministic: no other worker would open it) and nothing of the password shows."""
    service, worker, _keys = _setup(store, tmp_path)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(_locked()), SubmitRequest(password=PASSWORD))
    blobs, where = service.router.for_region("local"), password_key(job_prefix(job.tenant, job.id))
    sealed = bytearray(blobs.get(where))
    sealed[-1] ^= 0x01
    blobs.put(where, bytes(sealed))
    worker.run(until_idle=True)
    failed = store.get(job.id)
    assert failed.state is JobState.FAILED and failed.last_error_code == "object_integrity"
    assert [a.error_code for a in store.attempts(job.id)] == ["object_integrity"]
    assert PASSWORD not in (failed.last_error_message or "")
