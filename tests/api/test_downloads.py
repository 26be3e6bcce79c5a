"""Signed downloads: a stored artifact whose bytes fail their sha256 is never delivered whole (the
connection is aborted before the last byte, and the mismatch is audited), a link stops working once the
key that minted it is revoked, and the redirect and the download carry no-referrer / nosniff; on both
stores."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import httpx
import pytest

from .conftest import PDF, ApiEnv


def _published(env: ApiEnv, data: bytes) -> tuple[str, str, Path]:
    key = env.key()
    with env.client(key) as client:
        job_id = client.submit(PDF).id
    env.finish(job_id, data)
    artifact = env.store.artifact(job_id)
    assert artifact is not None
    path = Path(env.settings.storage_url.removeprefix("file://")) / artifact.key
    return key, job_id, path


def _location(env: ApiEnv, key: str, job_id: str) -> httpx.Response:
    return httpx.get(f"{env.base_url}/v1/jobs/{job_id}/artifact", headers={"Authorization": f"Bearer {key}"})


@pytest.mark.parametrize("where", ["first_chunk", "last_byte"])
def test_tampered_bytes_of_the_right_size_are_never_delivered_whole(any_env: ApiEnv, where: str) -> None:
    data = b"%PDF-1.4\n" + random.Random(7).randbytes(2_500_000)  # three 1 MiB read chunks
    key, job_id, path = _published(any_env, data)
    stored = bytearray(path.read_bytes())
    stored[10 if where == "first_chunk" else -1] ^= 0x01
    path.write_bytes(bytes(stored))
    location = _location(any_env, key, job_id).headers["location"]
    received = b""
    with httpx.stream("GET", f"{any_env.base_url}{location}", timeout=30) as response:
        assert response.status_code == 200 and int(response.headers["content-length"]) == len(data)
        with pytest.raises(httpx.RemoteProtocolError):  # the server aborted mid-body
            for chunk in response.iter_raw():
                received += chunk
    assert len(received) < len(data)
    assert hashlib.sha256(received).hexdigest() != hashlib.sha256(data).hexdigest()
    failed = [e for e in any_env.store.audit_events(job_id) if e.action == "download_integrity_failed"]
    assert len(failed) == 1 and failed[0].reason == "sha256_mismatch"
    assert failed[0].details["bytes_sent"] == len(received)


def test_intact_artifacts_stream_whole_with_safe_headers(any_env: ApiEnv) -> None:
    data = b"%PDF-1.4\n" + random.Random(8).randbytes(2_200_000)
    key, job_id, _ = _published(any_env, data)
    redirect = _location(any_env, key, job_id)
    assert redirect.status_code == 307
    download = httpx.get(f"{any_env.base_url}{redirect.headers['location']}", timeout=30)
    assert download.status_code == 200 and download.content == data
    for response in (redirect, download):
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"
    assert not [e for e in any_env.store.audit_events(job_id) if e.action == "download_integrity_failed"]


def test_signed_url_is_refused_once_its_key_is_revoked(any_env: ApiEnv) -> None:
    key, job_id, _ = _published(any_env, b"%PDF-1.4 output\n")
    other = any_env.key()  # another live key of the tenant: its links stay valid
    location = _location(any_env, key, job_id).headers["location"]
    still = _location(any_env, other, job_id).headers["location"]
    assert httpx.get(f"{any_env.base_url}{location}").status_code == 200
    any_env.service.revoke_api_key(key.split("_")[1])
    refused = httpx.get(f"{any_env.base_url}{location}")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "signed_url_revoked"
    assert httpx.get(f"{any_env.base_url}{still}").status_code == 200
