"""The console's JSON endpoints: keys required (401/403), tenants kept apart (a tenant admin too),
operator-only claim pauses and class modes, and nothing that names document bytes, storage keys, keys
or (for tenant keys) worker hosts and pids."""

from __future__ import annotations

import httpx

from docfence.observability.inspect import inspect_job

from .helpers import Served, submit


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_data_endpoints_refuse_without_a_key(served: Served) -> None:
    job = submit(served.store)
    with httpx.Client(base_url=served.base_url, timeout=10) as http:
        page = http.get("/console")
        assert page.status_code == 200 and "docfence console" in page.text
        assert "default-src 'none'" in page.headers["content-security-policy"]
        for path in ("/console/api/whoami", "/console/api/summary", "/console/api/jobs",
                     f"/console/api/jobs/{job.id}"):
            resp = http.get(path)
            assert resp.status_code == 401, path
            assert resp.json()["error"]["code"] == "unauthorized"
        assert http.post("/console/api/pause", json={"scope": "all"}).status_code == 401
        assert http.get("/console/api/summary", headers=_auth("dfk_000000000000_wrong")).status_code == 401
        submit_only = served.service.create_api_key("acme", ("submit",))[1]
        assert http.get("/console/api/summary", headers=_auth(submit_only)).status_code == 403
        assert http.get("/console/static/../routes.py").status_code == 404
        assert http.get("/console/static/index.html").status_code == 404  # only the listed assets
    assert served.store.paused_scopes() == []


def test_read_key_sees_its_tenant_only_and_cannot_pause(served: Served) -> None:
    mine, theirs = submit(served.store, tenant="acme"), submit(served.store, tenant="other")
    read = served.service.create_api_key("acme", ("read",))[1]
    with httpx.Client(base_url=served.base_url, headers=_auth(read), timeout=10) as http:
        assert http.get("/console/api/whoami").json() == {"tenant": "acme", "all_tenants": False,
                                                          "operator": False, "admin": False,
                                                          "can_cancel": False, "can_delete": False,
                                                          "can_retry": False}
        rows = http.get("/console/api/jobs", params={"tenant": "other"}).json()["jobs"]
        assert [r["id"] for r in rows] == [mine.id]
        found = http.get("/console/api/jobs", params={"job_id": f" {mine.id} "}).json()["jobs"]
        assert [r["id"] for r in found] == [mine.id]
        assert http.get("/console/api/jobs", params={"cursor": "bogus"}).status_code in (400, 422)
        for hidden in (theirs.id, "job_nope"):
            assert http.get("/console/api/jobs", params={"job_id": hidden}).json()["jobs"] == []
        assert http.get("/console/api/summary").json()["counts"]["queued"] == 1
        assert http.get(f"/console/api/jobs/{theirs.id}").status_code == 404
        assert http.post("/console/api/pause", json={"scope": "raster"}).status_code == 403


def test_a_tenant_admin_sees_its_tenant_only_and_cannot_pause(served: Served) -> None:
    mine, theirs = submit(served.store, tenant="acme"), submit(served.store, tenant="other")
    served.store.claim("host-987654321-abcdef", limit=5)
    admin = served.service.create_api_key("acme", ("admin",))[1]
    with httpx.Client(base_url=served.base_url, headers=_auth(admin), timeout=10) as http:
        assert http.get("/console/api/whoami").json() == {"tenant": "acme", "all_tenants": False,
                                                          "operator": False, "admin": True,
                                                          "can_cancel": True, "can_delete": True,
                                                          "can_retry": True}
        rows = http.get("/console/api/jobs", params={"tenant": "other"}).json()["jobs"]
        assert [r["id"] for r in rows] == [mine.id]
        summary = http.get("/console/api/summary").json()
        assert summary["counts"]["rendering"] == 1 and summary["valid_leases"] is None
        assert http.get(f"/console/api/jobs/{theirs.id}").status_code == 404
        detail = http.get(f"/console/api/jobs/{mine.id}").json()
        for path in ("/console/api/pause", "/console/api/resume"):
            assert http.post(path, json={"scope": "all"}).status_code == 403
        mode = http.post("/console/api/class-modes", json={"document_class": "default", "mode": "raster"})
        assert mode.status_code == 403
    assert "987654321" not in repr(detail) and detail["attempts"][0]["worker"].startswith("worker-")
    assert served.store.paused_scopes() == [] and served.store.class_modes() == {}


def test_operator_sees_everything_and_pauses_claims(served: Served) -> None:
    a, b = submit(served.store, tenant="acme"), submit(served.store, tenant="other", mode="raster")
    admin = served.service.create_api_key("ops", ("operator",))[1]
    with httpx.Client(base_url=served.base_url, headers=_auth(admin), timeout=10) as http:
        summary = http.get("/console/api/summary").json()
        assert summary["counts"]["queued"] == 2 and summary["age"]["series"]["queued"][-1] == 0
        assert set(summary["throughput"]["series"]) == {"succeeded", "failed", "canceled"}
        rows = http.get("/console/api/jobs", params={"mode": "raster"}).json()["jobs"]
        assert [r["id"] for r in rows] == [b.id]
        assert http.get("/console/api/jobs", params={"state": "failed"}).json()["jobs"] == []
        assert http.get("/console/api/jobs", params={"state": "bogus"}).status_code == 422
        detail = http.get(f"/console/api/jobs/{a.id}").json()
        assert http.post("/console/api/pause", json={"scope": "raster", "reason": "rollback"}).json() == {
            "paused": ["raster"]}
        (pause,) = http.get("/console/api/summary").json()["pauses"]  # who paused, when and why
        assert pause["scope"] == "raster" and pause["reason"] == "rollback"
        assert pause["actor"].startswith("key:") and pause["at"]
        tenant = served.service.create_api_key("acme", ("read",))[1]
        seen = httpx.get(f"{served.base_url}/console/api/summary", headers=_auth(tenant), timeout=10).json()
        assert seen["paused"] == ["raster"] and seen["pauses"] == []  # a tenant sees what, not who or why
        assert http.post("/console/api/resume", json={"scope": "raster", "reason": "fixed"}).json() == {
            "paused": []}
        assert http.post("/console/api/class-modes", json={"document_class": "default", "mode": "raster"}
                         ).json() == {"class_modes": {"default": "raster"}}
        assert http.post("/console/api/class-modes", json={"document_class": "nope", "mode": "raster"}
                         ).status_code == 422
    ops = [(e.action, e.reason) for e in served.store.iter_audit() if e.action.startswith("claims_")]
    assert ops == [("claims_paused", "rollback"), ("claims_resumed", "fixed")]
    assert detail["job"]["state"] == "queued" and detail["next_steps"]
    text = repr(detail)
    assert "input.pdf" not in text and "CONFIDENTIAL" not in text and "dfk_" not in text
    assert inspect_job(served.store, a.id).job.id in text


def test_metrics_endpoint_is_mounted(served: Served) -> None:
    submit(served.store)
    resp = httpx.get(f"{served.base_url}/metrics", timeout=10)
    assert resp.status_code == 200 and 'docfence_jobs{state="queued"} 1.0' in resp.text
