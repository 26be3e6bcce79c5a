"""Encryption at rest as operators see it, on SQLite and PostgreSQL: `docfence inspect` (text and
--json) and the console's job view say whether a job's bytes are sealed, under which key provider and
key-encryption key (a fingerprint, never the key or its id) and when deletion destroyed its data key; a
job stored before encryption reads "plaintext". A tampered object or a lost key-encryption key fails the
download with a coded error and is counted in docfence_encryption_failures_total."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY

from docfence.blobs import RegionRouter
from docfence.blobs.kek.jobs import JobKeys
from docfence.blobs.kek.local import LocalKeyProvider
from docfence.core.access import Principal
from docfence.core.errors import BlobIntegrityError, ConfigError
from docfence.core.ids import new_id
from docfence.core.records import NewJob, key_fingerprint
from docfence.maintenance.deletion import DeletionService
from docfence.service.artifacts_keys import job_keys
from docfence.storage_keys import input_key
from docfence.worker.runner import Worker

from .conftest import PDF, ApiEnv

HANG_GUARD_S = 300.0  # only stops a broken build from hanging; nothing asserts on durations
OUTPUT = b"%PDF-1.4 watermarked output of a sealed job\n" * 40


def _inspect(env: ApiEnv, *args: str) -> subprocess.CompletedProcess[str]:
    cli_env = {k: v for k, v in os.environ.items() if k != "DOCFENCE_CONFIG"}
    cli_env.update(DOCFENCE_DATABASE_URL=env.settings.database_url,
                   DOCFENCE_STORAGE_URL=env.settings.storage_url)
    done = subprocess.run([sys.executable, "-m", "docfence.cli", "inspect", *args], cwd=env.tmp,
                          capture_output=True, text=True, timeout=HANG_GUARD_S, env=cli_env, check=False)
    assert done.returncode == 0, done.stderr
    return done


def _console_detail(env: ApiEnv, job_id: str) -> dict[str, object]:
    key = env.key(scopes=("read",))
    with httpx.Client(base_url=env.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        resp = http.get(f"/console/api/jobs/{job_id}")
    assert resp.status_code == 200, resp.text
    detail: dict[str, object] = resp.json()
    return detail


def _failures(op: str, code: str) -> float:
    return REGISTRY.get_sample_value("docfence_encryption_failures_total", {"op": op, "code": code}) or 0.0


def _download(env: ApiEnv, job_id: str) -> bytes:
    record, _secret = env.service.create_api_key("acme", ("read",), name="downloads")
    principal = Principal(record.id, "acme", record.scopes)
    download = env.service.open_signed(env.service.artifact_url_token(principal, job_id))
    try:
        return b"".join(download.chunks)
    finally:
        download.close()


def test_a_sealed_job_shows_its_provider_and_kek_and_then_its_destroyed_key(any_env: ApiEnv) -> None:
    env = any_env
    with env.client() as client:
        job = client.submit(PDF)
    env.finish(job.id, OUTPUT)
    row = env.store.get(job.id)
    assert row.data_key_provider == "local" and row.data_key_kek_id and row.data_key_wrapped
    fingerprint = key_fingerprint("local", row.data_key_kek_id)
    expected = {"sealed": True, "provider": "local", "kek": fingerprint, "key_destroyed_at": None}

    as_json = _inspect(env, job.id, "--json").stdout
    assert json.loads(as_json)["encryption"] == expected
    text = _inspect(env, job.id).stdout
    assert f"encryption sealed, provider local, kek {fingerprint}\n" in text
    console = _console_detail(env, job.id)
    assert console["encryption"] == expected
    for shown in (as_json, text, json.dumps(console)):  # a fingerprint only: never the key or its id
        assert row.data_key_wrapped not in shown and row.data_key_kek_id not in shown
    assert _download(env, job.id) == OUTPUT

    DeletionService(env.store, env.service.router).delete_job(job.id, actor="dpo", request_id="DR-7")
    event = next(e for e in env.store.audit_events(job.id) if e.action == "bytes_deletion")
    gone = {**expected, "key_destroyed_at": event.at.isoformat()}
    assert json.loads(_inspect(env, job.id, "--json").stdout)["encryption"] == gone
    assert f"; data key destroyed {event.at.isoformat()}" in _inspect(env, job.id).stdout
    assert _console_detail(env, job.id)["encryption"] == gone


def test_a_job_stored_before_encryption_reads_plaintext(any_env: ApiEnv) -> None:
    env = any_env
    policy = env.settings.policy_for("default")
    job_id = new_id()
    info = env.service.router.for_region(policy.region).put(input_key("acme", job_id), PDF)
    env.store.submit(NewJob(tenant="acme", policy=policy, input_key=info.key, input_sha256=info.sha256,
                            input_bytes=info.bytes, job_id=job_id))
    plain = {"sealed": False, "provider": None, "kek": None, "key_destroyed_at": None}
    assert json.loads(_inspect(env, job_id, "--json").stdout)["encryption"] == plain
    assert "encryption plaintext (stored before encryption at rest)" in _inspect(env, job_id).stdout
    assert _console_detail(env, job_id)["encryption"] == plain


def test_a_tampered_object_fails_the_download_and_is_counted(any_env: ApiEnv) -> None:
    env = any_env
    with env.client() as client:
        job = client.submit(PDF)
    done = env.finish(job.id, OUTPUT)
    artifact = env.store.artifact(done.id)
    assert artifact is not None
    stored = Path(env.settings.storage_url.removeprefix("file://")) / artifact.key
    sealed = bytearray(stored.read_bytes())
    assert OUTPUT[:40] not in sealed  # sealed at rest
    sealed[len(sealed) // 2] ^= 0x01
    stored.write_bytes(bytes(sealed))

    before = _failures("open", "object_integrity")
    with pytest.raises(BlobIntegrityError) as raised:
        _download(env, job.id)
    assert raised.value.code == "object_integrity"
    assert _failures("open", "object_integrity") == before + 1
    assert [e.action for e in env.store.audit_events(job.id)][-1] == "download_integrity_failed"


def test_a_lost_key_encryption_key_fails_the_download_with_a_code_and_is_counted(any_env: ApiEnv) -> None:
    """The key file replaced by one without the job's KEK (a lost kek.key restored from nothing): the row,
    its audit chain and inspect still answer; the bytes cannot be opened, and that is counted."""
    env = any_env
    with env.client() as client:
        job = client.submit(PDF)
    env.finish(job.id, OUTPUT)
    config = job_keys(env.service).config
    env.service.job_keys = JobKeys(config, None, provider=LocalKeyProvider(env.tmp / "new" / "kek.key"))
    before = _failures("unwrap", "config_invalid")
    with pytest.raises(ConfigError) as raised:
        _download(env, job.id)
    assert raised.value.code == "config_invalid" and "is not in" in raised.value.message
    assert _failures("unwrap", "config_invalid") == before + 1
    assert json.loads(_inspect(env, job.id, "--json").stdout)["encryption"]["sealed"] is True
    assert env.store.get(job.id).input_sha256 == hashlib.sha256(PDF).hexdigest()  # the row is intact


def test_a_tampered_input_fails_the_attempt_and_the_worker_counts_it(env: ApiEnv) -> None:
    with env.client() as client:
        job = client.submit(PDF)
    row = env.store.get(job.id)
    assert row.input_key is not None
    stored = Path(env.settings.storage_url.removeprefix("file://")) / row.input_key
    sealed = bytearray(stored.read_bytes())
    sealed[-5] ^= 0x01
    stored.write_bytes(bytes(sealed))
    before = _failures("open", "object_integrity")
    worker = Worker(env.settings, env.store, RegionRouter.from_config(env.settings.region_urls()))
    assert worker.run(until_idle=True).failed == 1
    assert env.store.get(job.id).last_error_code == "object_integrity"
    assert _failures("open", "object_integrity") == before + 1
