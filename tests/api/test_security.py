"""Authentication, scopes, tenant isolation, signed URLs and what never reaches the DB or the logs."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from pathlib import Path

import httpx
import pytest

from docfence.client import Forbidden, JobNotFound, Unauthorized

from .conftest import PDF, ApiEnv


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _succeeded_job(env: ApiEnv, key: str) -> str:
    with env.client(key) as client:
        job = client.submit(PDF)
    env.finish(job.id, b"%PDF-1.4 secret output\n")
    return job.id


def _redirect(env: ApiEnv, key: str, job_id: str) -> str:
    response = httpx.get(f"{env.base_url}/v1/jobs/{job_id}/artifact", headers=_auth(key))
    assert response.status_code == 307 and response.headers["cache-control"] == "no-store"
    location: str = response.headers["location"]
    assert location.startswith("/v1/signed/")
    return location


def test_missing_wrong_malformed_and_revoked_keys_are_401(env: ApiEnv) -> None:
    key = env.key()
    key_id = key.split("_")[1]
    wrong_secret = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    env.service.revoke_api_key(env.key().split("_")[1])
    revoked = env.key()
    env.service.revoke_api_key(revoked.split("_")[1])
    attempts = [
        {}, {"Authorization": "Bearer"}, _auth("nonsense"), _auth(wrong_secret), _auth(f"dfk_{key_id}_"),
        _auth("dfk_000000000000_secret"), _auth(revoked), {"Authorization": f"Basic {key}"},
    ]
    with httpx.Client(base_url=env.base_url) as http:
        for headers in attempts:
            for response in (http.get("/v1/jobs/job_x", headers=headers),
                             http.post("/v1/jobs", headers=headers, files={"file": ("a.pdf", PDF)})):
                assert response.status_code == 401, headers
                assert response.json()["error"]["code"] == "unauthorized"
                assert response.headers["www-authenticate"] == "Bearer"
        assert http.get("/v1/jobs/job_x", headers=_auth(key)).status_code == 404
    assert env.store.list_jobs() == []


def test_scopes_are_enforced_and_admin_implies_all(env: ApiEnv) -> None:
    reader, submitter = env.key(scopes=("read",)), env.key(scopes=("submit",))
    admin = env.key(scopes=("admin",))
    with env.client(reader) as client, pytest.raises(Forbidden):
        client.submit(PDF)
    with env.client(submitter) as client:
        job = client.submit(PDF)
        with pytest.raises(Forbidden):
            client.get(job.id)
    with env.client(admin) as client:
        assert client.get(job.id).id == job.id
        assert client.cancel(client.submit(PDF).id).state == "canceled"


def test_another_tenants_job_is_404_everywhere(env: ApiEnv) -> None:
    job_id = _succeeded_job(env, env.key("acme"))
    other = env.key("globex", scopes=("admin",))
    with env.client(other) as client:
        for call in (client.get, client.cancel, client.events):
            with pytest.raises(JobNotFound):
                call(job_id)
        with pytest.raises(JobNotFound):
            client.download(job_id, env.tmp / "stolen.pdf")
    response = httpx.get(f"{env.base_url}/v1/jobs/{job_id}/artifact", headers=_auth(other))
    assert response.status_code == 404
    assert not (env.tmp / "stolen.pdf").exists()


def test_signed_url_expires_and_refuses_tampering(env: ApiEnv) -> None:
    key = env.key()
    job_id = _succeeded_job(env, key)
    location = _redirect(env, key, job_id)
    body, _, mac = location.removeprefix("/v1/signed/").partition(".")
    flipped = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1]
    with httpx.Client(base_url=env.base_url) as http:
        assert http.get(location).content == b"%PDF-1.4 secret output\n"
        for bad in (f"/v1/signed/{flipped}.{mac}", f"/v1/signed/{body}.{mac[:-1]}x", f"/v1/signed/{body}",
                    "/v1/signed/garbage", f"/v1/signed/{body}.{mac}=", "/v1/signed/\u00df\u00df.\u00e9"):
            response = http.get(bad)
            assert response.status_code == 403 and response.json()["error"]["code"] == "signed_url_invalid"
        env.clock.advance(env.settings.signed_url_ttl_s + 1)
        expired = http.get(location)
    assert expired.status_code == 403 and expired.json()["error"]["code"] == "signed_url_expired"
    downloads = [e for e in env.store.audit_events(job_id) if e.action == "download"]
    assert len(downloads) == 1 and downloads[0].actor == f"key:{key.split('_')[1]}"


def test_signed_url_is_410_once_the_artifact_is_deleted(env: ApiEnv) -> None:
    key = env.key()
    job_id = _succeeded_job(env, key)
    location = _redirect(env, key, job_id)
    artifact = env.store.artifact(job_id)
    assert artifact is not None
    env.service.router.for_region("local").delete(artifact.key)
    gone = httpx.get(f"{env.base_url}{location}")
    assert gone.status_code == 410 and gone.json()["error"]["code"] == "artifact_gone"
    with sqlite3.connect(env.settings.database_url.removeprefix("sqlite:///")) as db:
        db.execute("UPDATE artifacts SET deleted_at = 1 WHERE job_id = ?", (job_id,))
    gone_row = httpx.get(f"{env.base_url}{location}")
    assert gone_row.status_code == 410
    again = httpx.get(f"{env.base_url}/v1/jobs/{job_id}/artifact", headers=_auth(key))
    assert again.status_code == 410


def test_client_sends_no_authorization_to_the_signed_url(env: ApiEnv) -> None:
    key = env.key()
    job_id = _succeeded_job(env, key)
    with env.client(key) as client:
        client.download(job_id, env.tmp)
    signed = [s for s in env.seen if s.path.startswith("/v1/signed/")]
    assert len(signed) == 1 and signed[0].authorization is None
    assert all(s.authorization for s in env.seen if s.path.startswith("/v1/jobs"))
    assert (env.tmp / f"{job_id}.pdf").read_bytes() == b"%PDF-1.4 secret output\n"


def test_artifact_of_an_unfinished_job_is_409(env: ApiEnv) -> None:
    key = env.key()
    with env.client(key) as client:
        job = client.submit(PDF)
    response = httpx.get(f"{env.base_url}/v1/jobs/{job.id}/artifact", headers=_auth(key))
    assert response.status_code == 409 and response.json()["error"]["code"] == "artifact_not_ready"


def test_keys_are_stored_only_as_hashes(env: ApiEnv) -> None:
    key = env.key()
    secret = key.split("_", 2)[2]
    db_path = Path(env.settings.database_url.removeprefix("sqlite:///"))
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT * FROM api_keys").fetchall()
        audit = db.execute("SELECT details FROM audit_events").fetchall()
    dump = repr(rows) + repr(audit)
    assert secret not in dump and key not in dump
    assert hashlib.sha256(secret.encode()).hexdigest() in dump
    for path in db_path.parent.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_logs_carry_no_key_or_signed_url(env: ApiEnv, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    key = env.key()
    job_id = _succeeded_job(env, key)
    with env.client(key) as client:
        client.download(job_id, env.tmp / "out.pdf")
        with pytest.raises(Unauthorized):
            client.__class__(env.base_url, key + "x").get(job_id)
    token = next(s.path for s in env.seen if s.path.startswith("/v1/signed/")).removeprefix("/v1/signed/")
    text = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert token not in text and key.split("_", 2)[2] not in text
    assert job_id in text


def test_signing_secret_is_generated_once_with_mode_0600(env: ApiEnv) -> None:
    path = Path(env.settings.database_url.removeprefix("sqlite:///")).parent / "signing.key"
    assert path.stat().st_mode & 0o777 == 0o600
    from docfence.service import load_signing_secret

    assert load_signing_secret(env.settings) == path.read_bytes().strip()


@pytest.mark.parametrize("corruption", ["same_length", "truncated"])
def test_corrupted_artifact_is_never_written_by_the_client(env: ApiEnv, corruption: str) -> None:
    from docfence.client import DownloadIntegrityError, TransportError

    key = env.key()
    job_id = _succeeded_job(env, key)
    artifact = env.store.artifact(job_id)
    assert artifact is not None
    path = Path(env.settings.storage_url.removeprefix("file://")) / artifact.key
    original = path.read_bytes()
    path.write_bytes(original[:-1] + b"X" if corruption == "same_length" else original[:5])
    with env.client(key) as client, pytest.raises((DownloadIntegrityError, TransportError)):
        client.download(job_id, env.tmp / "out.pdf")
    assert not (env.tmp / "out.pdf").exists()
    assert not [p for p in env.tmp.iterdir() if p.name.startswith(".out.pdf")]
