"""`/v1/webhooks/endpoints` over a served API on both stores: a tenant admin manages its own tenant's
endpoints, the secret appears once, other scopes and tenants are refused, and a delivered webhook
verifies with the secret the API handed out; the job's events show the attempt."""

from __future__ import annotations

import httpx
import pytest

from docfence.config import WebhooksConfig
from docfence.maintenance.webhooks import WebhookDispatcher
from docfence.testing.webhook_receiver import Receiver, receiving

from .conftest import PDF, ApiEnv, api_env

pytestmark = pytest.mark.postgres


def _call(env: ApiEnv, key: str, method: str, path: str, **kw: object) -> httpx.Response:
    return httpx.request(method, f"{env.base_url}{path}", headers={"Authorization": f"Bearer {key}"},
                         timeout=30, **kw)  # type: ignore[arg-type]


def test_admin_manages_its_tenants_endpoints_and_the_secret_is_shown_once(any_env: ApiEnv) -> None:
    admin, reader = any_env.key(scopes=("admin",)), any_env.key(scopes=("read", "submit"))
    other_admin = any_env.key(tenant="globex", scopes=("admin",))
    body = {"url": "https://hooks.example.org/docfence", "events": ["job.succeeded", "job.failed"]}
    assert _call(any_env, reader, "POST", "/v1/webhooks/endpoints", json=body).status_code == 403
    created = _call(any_env, admin, "POST", "/v1/webhooks/endpoints", json=body)
    assert created.status_code == 201, created.text
    endpoint = created.json()
    assert endpoint["secret"].startswith("whsec_") and endpoint["tenant"] == "acme"
    listed = _call(any_env, admin, "GET", "/v1/webhooks/endpoints").json()
    assert [e["id"] for e in listed] == [endpoint["id"]] and "secret" not in listed[0]
    assert _call(any_env, other_admin, "GET", "/v1/webhooks/endpoints").json() == []
    path = f"/v1/webhooks/endpoints/{endpoint['id']}"
    assert _call(any_env, other_admin, "DELETE", path).status_code == 404
    rotated = _call(any_env, admin, "POST", f"{path}/rotate-secret").json()
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != endpoint["secret"]
    disabled = _call(any_env, admin, "DELETE", path).json()
    assert disabled["disabled_at"] is not None and "secret" not in disabled
    assert _call(any_env, admin, "POST", f"{path}/rotate-secret").status_code == 404


@pytest.mark.parametrize("body, field", [
    ({"url": "ftp://x.example/"}, "url"),
    ({"url": "http://10.0.0.1/hook"}, "url"),  # a private address written in the URL
    ({"url": "http://user:pw@x.example/"}, "url"),
    ({"url": "https://x.example/", "events": ["job.started"]}, "events"),
])
def test_invalid_endpoints_are_refused_with_the_field(env: ApiEnv, body: dict, field: str) -> None:  # type: ignore[type-arg]
    answer = _call(env, env.key(scopes=("admin",)), "POST", "/v1/webhooks/endpoints", json=body)
    assert answer.status_code in (400, 422) and answer.json()["error"]["field"] == field, answer.text


def test_a_job_webhook_verifies_with_the_api_secret_and_shows_in_the_job_events(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = WebhooksConfig(allow_hosts=("127.0.0.1",), read_timeout_s=2.0, connect_timeout_s=2.0)
    receiver = Receiver(secret="")
    with api_env(tmp_path, webhooks=config) as env, receiving(receiver) as url:
        admin = env.key(scopes=("admin",))
        created = _call(env, admin, "POST", "/v1/webhooks/endpoints", json={"url": url}).json()
        receiver.secret = created["secret"]
        with env.client(env.key()) as client:
            job = env.finish(client.submit(PDF).id)
        result = WebhookDispatcher(env.store, config, worker="d1").run_once()
        assert len(result.delivered) == 1 and receiver.bad_signatures == 0
        events = _call(env, admin, "GET", f"/v1/jobs/{job.id}/events").json()["events"]
    (payload,) = receiver.payloads.values()
    assert payload["data"]["job_id"] == job.id and payload["type"] == "job.succeeded"
    attempt = next(e for e in events if e["action"] == "webhook_attempt")
    assert attempt["reason"] == "delivered" and attempt["details"]["status_code"] == 204


def test_the_python_client_manages_endpoints(env: ApiEnv) -> None:
    from docfence.client import Forbidden, JobNotFound

    with env.client(env.key(scopes=("admin",))) as admin, env.client(env.key()) as plain:
        created = admin.create_webhook_endpoint("https://hooks.example.org/c", ["job.failed"],
                                                description="billing")
        assert created["secret"].startswith("whsec_") and created["events"] == ["job.failed"]
        assert [e["id"] for e in admin.list_webhook_endpoints()] == [created["id"]]
        assert admin.rotate_webhook_secret(created["id"])["secret"] != created["secret"]
        assert admin.disable_webhook_endpoint(created["id"])["disabled_at"] is not None
        with pytest.raises(Forbidden):
            plain.list_webhook_endpoints()
        with pytest.raises(JobNotFound):  # the client's not-found error for any missing record
            admin.rotate_webhook_secret("whe_missing")
