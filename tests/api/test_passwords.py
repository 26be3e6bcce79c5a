"""PDF passwords through the service, on both stores: an encrypted PDF submitted with its password is
watermarked by a real worker (its render process gets the password) and keeps its encryption; the
password appears nowhere in the database, the logs or the events; it is sealed beside the input and
goes with the input's deletion."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pikepdf
import pytest

from docfence.blobs import RegionRouter
from docfence.blobs.sealed import fetch_sealed, load_key, open_under, password_key
from docfence.client import InvalidRequest, JobFailed
from docfence.config import Settings
from docfence.core.errors import ConfigError
from docfence.samples import pdfs
from docfence.service.artifacts_keys import row_key
from docfence.storage_keys import job_prefix
from docfence.worker.runner import Worker

from .conftest import ApiEnv

PASSWORD = "Corr3ct-h0rse-\u00e9-battery"  # distinctive, so any leak is found by a plain search


def _encrypted() -> bytes:
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(2)))
    out = io.BytesIO()
    pdf.save(out, encryption=pikepdf.Encryption(owner="owner-" + PASSWORD, user=PASSWORD, R=6))
    return out.getvalue()


def _database_text(env: ApiEnv) -> bytes:
    """Every byte the database holds: the SQLite files (WAL included), or every row of every table."""
    if env.store.dialect == "sqlite":
        db = Path(env.settings.database_url[len("sqlite:///"):])
        return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    conn = env.store._conn()  # type: ignore[attr-defined]
    listed = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    tables = [r["tablename"] for r in listed]
    dump = [str(r["t"]) for t in tables for r in conn.execute(f"SELECT {t}::text AS t FROM {t}")]
    return "\n".join(dump).encode()


def _run_worker(env: ApiEnv) -> None:
    regions = RegionRouter.from_config(env.settings.region_urls())
    Worker(env.settings, env.store, regions).run(until_idle=True)


def test_an_encrypted_pdf_is_processed_with_its_password_and_stays_encrypted(
    any_env: ApiEnv, tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    source = tmp_path / "locked.pdf"
    source.write_bytes(_encrypted())
    with any_env.client() as client:
        job = client.submit(source, password=PASSWORD, label="locked")
        without = client.submit(source, label="locked-no-password")
        _run_worker(any_env)
        done = client.wait(job.id, budget_s=60)
        out = client.download(done.id, tmp_path / "out.pdf")
        with pytest.raises(JobFailed) as failed:
            client.wait(without.id, budget_s=60)
        events = [client.events(job.id), client.events(without.id)]
    assert failed.value.job is not None and failed.value.job.error_code == "password_required"
    with pikepdf.open(out, password=PASSWORD) as pdf:
        assert pdf.is_encrypted and len(pdf.pages) == 2  # the output keeps the input's encryption
    with pytest.raises(pikepdf.PasswordError):
        pikepdf.open(out)
    needle = PASSWORD.encode()
    assert needle not in _database_text(any_env)
    assert PASSWORD not in str(events)
    captured = capfd.readouterr()
    assert PASSWORD not in caplog.text and PASSWORD not in captured.out + captured.err
    sealed = any_env.service.router.for_region("local").get(password_key(job_prefix("acme", job.id)))
    assert needle not in sealed  # sealed at rest, not stored as given


def test_the_sealed_password_goes_with_the_job_deletion(env: ApiEnv) -> None:
    with env.client(env.key(scopes=("admin",))) as client:
        job = client.submit(_encrypted(), password=PASSWORD)
        blobs = env.service.router.for_region("local")
        prefix = job_prefix("acme", job.id)
        data_key = env.service.job_keys.key_for(row_key(env.store.get(job.id)))
        sealed = fetch_sealed(blobs, prefix)
        assert data_key is not None and sealed is not None  # sealed under the job's own data key
        assert open_under(sealed, data_key, prefix) == PASSWORD
        client.cancel(job.id)
        env.service.delete(env.service.authenticate(client._http.headers["authorization"][7:]),
                           job.id, "req-1")
        assert not blobs.exists(password_key(prefix))


def test_a_replay_or_refusal_keeps_no_sealed_password(env: ApiEnv) -> None:
    locked = _encrypted()
    with env.client() as client:
        first = client.submit(locked, password=PASSWORD, idempotency_key="k")
        again = client.submit(locked, password=PASSWORD, idempotency_key="k")
        with pytest.raises(InvalidRequest):
            client.submit(locked, password=PASSWORD, deadline_s=10**9)
    assert again.id == first.id
    sealed = list((env.tmp / "objects").rglob("password.sealed"))
    assert [p.parent.name for p in sealed] == [first.id]


def test_password_key_setting_is_checked_and_required_without_a_data_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as bad:
        load_key(Settings(database_url=f"sqlite:///{tmp_path}/x.db", password_key="not-a-key"))
    assert "DOCFENCE_PASSWORD_KEY" in bad.value.message
    remote = Settings(database_url="postgresql://db/x", storage_url="s3://bucket/p")
    with pytest.raises(ConfigError) as missing:
        load_key(remote)
    assert "DOCFENCE_PASSWORD_KEY" in missing.value.message
    generated = load_key(Settings(database_url=f"sqlite:///{tmp_path}/x.db"))
    assert load_key(Settings(database_url=f"sqlite:///{tmp_path}/x.db")) == generated  # kept, not regenerated
    assert (tmp_path / "password.key").stat().st_mode & 0o777 == 0o600


def test_a_worker_with_another_key_fails_the_attempt_naming_the_setting(env: ApiEnv) -> None:
    """A job whose row names no key provider (seal_new_jobs off) has its password sealed by password.key."""
    from dataclasses import replace

    from cryptography.fernet import Fernet

    from docfence.blobs.kek.jobs import JobKeys

    unsealed = replace(env.settings.encryption, seal_new_jobs=False)
    env.service.job_keys = JobKeys(unsealed, env.settings.data_folder())
    with env.client() as client:
        job = client.submit(_encrypted(), password=PASSWORD)
    other = replace(env.settings, password_key=Fernet.generate_key().decode())
    Worker(other, env.store, RegionRouter.from_config(other.region_urls())).run(until_idle=True)
    attempts = env.store.attempts(job.id)
    stored = env.store.get(job.id)
    assert attempts and attempts[0].error_code == "storage_error"
    assert "DOCFENCE_PASSWORD_KEY" in (stored.last_error_message or "")
    assert PASSWORD not in (stored.last_error_message or "")
