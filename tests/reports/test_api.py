"""The report routes over the app (in-process): template versions, idempotent report requests with their
jobs, retry conflicts, schedules; tenants see only their own requests."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docfence.api import create_app
from docfence.config import Settings
from docfence.samples.monthly_report import load_monthly_bundle, sample_monthly_data
from docfence.service import Service, build_service
from docfence.store.base import open_store
from docfence.testing.servers import running


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[httpx.Client, Service]]:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/docfence.db", storage_url=f"file:{tmp_path}/obj")
    store = open_store(settings.database_url)
    service = build_service(settings, store)
    app = create_app(settings, service=service)
    app.state.report_processors = ("vendor",)
    try:
        with running(app) as base, httpx.Client(base_url=base, timeout=30) as client:
            yield client, service
    finally:
        store.close()


def auth(service: Service, tenant: str, scopes: tuple[str, ...]) -> dict[str, str]:
    return {"Authorization": f"Bearer {service.create_api_key(tenant, scopes)[1]}"}


def template_body() -> dict[str, object]:
    b = load_monthly_bundle()
    return {"id": "monthly", "html": b.html, "css": b.css, "schema": b.schema,
            "assets": {k: base64.b64encode(v).decode() for k, v in b.assets.items()}}


def test_templates_requests_retry_and_schedules(api: tuple[httpx.Client, Service]) -> None:
    client, service = api
    admin, user = auth(service, "acme", ("admin",)), auth(service, "acme", ("submit", "read"))
    assert client.post("/v1/templates", json=template_body(), headers=user).status_code == 403
    created = client.post("/v1/templates", json=template_body(), headers=admin)
    assert created.status_code == 201 and created.json()["ref"] == "monthly@1"
    assert client.post("/v1/templates", json=template_body(), headers=admin).status_code == 200
    broken = client.post("/v1/templates", json={**template_body(), "assets": {"x": "%%"}}, headers=admin)
    # the schema states the base64 pattern, so the request's own validation names the field
    assert broken.status_code == 422 and broken.json()["error"]["code"] == "invalid_request"
    assert broken.json()["error"]["field"] == "assets"
    listed = client.get("/v1/templates", headers=user).json()
    assert [t["ref"] for t in listed] == ["monthly@1"]
    one = client.get("/v1/templates/monthly/versions/1", headers=user).json()
    assert one["asset_names"] == ["logo.svg"] and one["schema"]["type"] == "object"

    body = {"subject": "clinic-1", "period": "2026-01", "template": "monthly@1",
            "data": sample_monthly_data(pages=1)}
    first = client.post("/v1/report-requests", json=body, headers=user)
    again = client.post("/v1/report-requests", json=body, headers=user)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] and len(again.json()["jobs"]) == 1
    request_id = first.json()["id"]
    got = client.get(f"/v1/report-requests/{request_id}", headers=user).json()
    assert got["state"] == "queued" and got["processor"] == "local" and got["provider_observation"] is None
    other = auth(service, "other", ("read",))
    assert client.get(f"/v1/report-requests/{request_id}", headers=other).status_code == 404
    retry = client.post(f"/v1/report-requests/{request_id}/retry", headers=user)
    assert retry.status_code == 409 and retry.json()["error"]["code"] == "illegal_transition"
    bad = client.post("/v1/report-requests", json={**body, "processor": "nope"}, headers=user)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"

    sched = {"subject": "clinic-1", "template": "monthly@1", "day_of_month": 1, "processor": "vendor"}
    assert client.post("/v1/schedules", json=sched, headers=user).status_code == 201
    assert client.post("/v1/schedules", json=sched, headers=user).status_code == 200
    assert [s["processor"] for s in client.get("/v1/schedules", headers=user).json()] == ["vendor"]
    assert client.get("/v1/schedules", headers=other).json() == []


def test_bad_data_is_a_400_naming_the_path_and_a_failed_request_is_superseded(
    api: tuple[httpx.Client, Service],
) -> None:
    client, service = api
    admin, user = auth(service, "acme", ("admin",)), auth(service, "acme", ("submit", "read"))
    assert client.post("/v1/templates", json=template_body(), headers=admin).status_code == 201
    body = {"subject": "clinic-1", "period": "2026-01", "template": "monthly@1",
            "data": {**sample_monthly_data(pages=1), "clinic": ""}}
    refused = client.post("/v1/report-requests", json=body, headers=user)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_report_data"
    assert refused.json()["error"]["field"] == "data" and "$.clinic" in refused.json()["error"]["message"]
    period = client.post("/v1/report-requests", json={**body, "period": "october"}, headers=user)
    assert period.status_code == 422 and period.json()["error"]["field"] == "period"
    first = client.post("/v1/report-requests", json={**body, "data": sample_monthly_data(pages=1)},
                        headers=user)
    assert first.status_code == 201 and first.json()["revision"] == 1
    (claim,) = service.store.claim("w1")
    service.store.fail(claim.job.id, claim.attempt, "w1", "render_failed", "wrong", retryable=False)
    corrected = {**body, "data": sample_monthly_data(pages=1, seed=4), "watermark": {"text": "CORRECTED"}}
    conflict = client.post("/v1/report-requests", json=corrected, headers=user)
    assert conflict.status_code == 409 and "supersede" in conflict.json()["error"]["message"]
    second = client.post("/v1/report-requests", json={**corrected, "supersede": True}, headers=user)
    assert second.status_code == 201
    new = second.json()
    assert new["revision"] == 2 and new["supersedes"] == first.json()["id"]
    assert new["watermark"] == {"text": "CORRECTED"}
    assert new["jobs"][0]["state"] == "queued"
    old = client.get(f"/v1/report-requests/{first.json()['id']}", headers=user).json()
    assert old["superseded_by"] == new["id"] and old["jobs"][0]["state"] == "failed"
