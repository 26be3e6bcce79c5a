"""DELETE /v1/jobs/{id}: every byte goes, the tombstone stays, later downloads answer 410, and the
audit trail records who asked and when."""

from __future__ import annotations

import httpx

from docfence import storage_keys

from .conftest import ApiEnv
from .test_security import _auth, _redirect, _succeeded_job


def test_delete_over_http(any_env: ApiEnv) -> None:
    env = any_env
    key = env.key(scopes=("submit", "read"))
    admin = env.key(scopes=("admin",))
    job_id = _succeeded_job(env, key)
    location = _redirect(env, key, job_id)
    url = f"{env.base_url}/v1/jobs/{job_id}"
    refused = httpx.delete(url, params={"request_id": "DR-9"}, headers=_auth(key))
    assert refused.status_code == 403  # deletion needs the admin scope
    missing_id = httpx.delete(url, headers=_auth(admin))
    assert missing_id.status_code == 422 and missing_id.json()["error"]["code"] == "invalid_request"
    done = httpx.delete(url, params={"request_id": "DR-9"}, headers=_auth(admin))
    assert done.status_code == 200, done.text
    assert done.json()["deleted_at"] is not None and done.json()["state"] == "succeeded"
    store = env.service.router.for_region("local")
    assert list(store.list(storage_keys.job_prefix("acme", job_id).rstrip("/"))) == []
    assert httpx.get(f"{env.base_url}{location}").status_code == 410
    assert httpx.get(f"{url}/artifact", headers=_auth(key)).status_code == 410
    events = [e for e in env.store.audit_events(job_id) if e.action.startswith("bytes_")]
    assert [e.details.get("request_id") for e in events] == ["DR-9", "DR-9"]
    assert all(e.actor.startswith("key:") for e in events)
    other = env.key(tenant="other", scopes=("admin",))
    assert httpx.delete(url, params={"request_id": "x"}, headers=_auth(other)).status_code == 404
