"""Every route of the app, walked with every role and tenant: no key (401), a key without the
permission (403), another tenant's record (404, as if missing), and allowed (anything else). The routes
are enumerated from the app itself, so a new route fails here until its expected rules are written
down; the expectations below are written independently of core.access, on both stores."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from docfence.api import create_app
from docfence.api.gate import app_routes
from docfence.maintenance.webhook_endpoints import WebhookEndpoints
from docfence.reports import ReportRequests, RequestSpec, Templates
from docfence.reports.templates import TemplateBundle

from .conftest import PDF, ApiEnv

# route -> (roles allowed, names a record of tenant "a", the operator sees that record too)
RULES: dict[str, tuple[set[str], bool, bool]] = {
    "POST /v1/jobs": ({"submit", "admin"}, False, False),
    "POST /v1/jobs/batch": ({"submit", "admin"}, False, False),
    "GET /v1/jobs": ({"read", "admin"}, False, False),  # lists the key's own tenant only
    "GET /v1/jobs/{job_id}": ({"read", "admin"}, True, False),
    "POST /v1/jobs/{job_id}/cancel": ({"submit", "admin", "operator"}, True, True),  # operator: with a reason
    "DELETE /v1/jobs/{job_id}": ({"admin"}, True, False),
    "GET /v1/jobs/{job_id}/events": ({"read", "admin"}, True, False),
    "GET /v1/jobs/{job_id}/artifact": ({"read", "admin"}, True, False),
    "POST /v1/templates": ({"admin", "operator"}, False, False),
    "GET /v1/templates": ({"read", "admin", "operator"}, False, False),
    "GET /v1/templates/{template_id}/versions/{version}": ({"read", "admin", "operator"}, True, False),
    "POST /v1/report-requests": ({"submit", "admin"}, False, False),
    "GET /v1/report-requests/{request_id}": ({"read", "admin"}, True, False),
    "POST /v1/report-requests/{request_id}/retry": ({"submit", "admin", "operator"}, True, True),
    "POST /v1/schedules": ({"submit", "admin"}, False, False),
    "GET /v1/schedules": ({"read", "admin"}, False, False),
    "POST /v1/webhooks/endpoints": ({"admin"}, False, False),
    "GET /v1/webhooks/endpoints": ({"admin"}, False, False),
    "POST /v1/webhooks/endpoints/{endpoint_id}/rotate-secret": ({"admin"}, True, False),
    "DELETE /v1/webhooks/endpoints/{endpoint_id}": ({"admin"}, True, False),
    "GET /console/api/whoami": ({"read", "admin", "operator"}, False, False),
    "GET /console/api/summary": ({"read", "admin", "operator"}, False, False),
    "GET /console/api/jobs": ({"read", "admin", "operator"}, False, False),
    "GET /console/api/jobs/{job_id}": ({"read", "admin", "operator"}, True, True),
    "POST /console/api/cancel-matching/preview": ({"admin", "operator"}, False, False),  # read + cancel
    "POST /console/api/cancel-matching": ({"submit", "admin", "operator"}, False, False),
    "POST /console/api/pause": ({"operator"}, False, False),
    "POST /console/api/resume": ({"operator"}, False, False),
    "POST /console/api/class-modes": ({"operator"}, False, False),
}
PUBLIC = {
    "GET /v1/verify/{job_id}",  # a recipient checks a document: answers only what is safe to publish
    "POST /v1/verify/{job_id}",
    "GET /openapi.json",
    "GET /docs",
    "GET /docs/static/{name}",
    "GET /v1/capabilities",
    "GET /healthz",
    "GET /readyz",
    "GET /v1/signed/{token}",
    "GET /console",
    "GET /console/static/{name}",
    "GET /metrics",
}
# (name, tenant, scopes); "none" presents no key
PRINCIPALS = [
    ("none", None, ()),
    ("a-submit", "a", ("submit",)),
    ("a-read", "a", ("read",)),
    ("a-admin", "a", ("admin",)),
    ("b-admin", "b", ("admin",)),
    ("b-read", "b", ("read",)),
    ("operator", "operators", ("operator",)),
]


def _route_keys(env: ApiEnv) -> set[str]:
    app = create_app(env.settings, service=env.service)
    keys = set()
    for path, route in app_routes(app):
        for method in getattr(route, "methods", None) or ():
            if method != "HEAD":
                keys.add(f"{method} {path}")
    return keys


def _fixtures(env: ApiEnv) -> dict[str, str]:
    """Tenant a's records: a succeeded job, a private template, a report request; a signed token."""
    key = env.key("a", ("submit", "read"))
    with env.client(key) as client:
        job_id = client.submit(PDF).id
    env.finish(job_id)
    templates = Templates(env.store)
    bundle = TemplateBundle(name="t", html="<p>x</p>", css="", assets={}, schema={"type": "object"})
    templates.create_version("a-private", bundle, actor="test", owner="a")
    templates.create_version("shared", bundle, actor="test", owner=None)
    requests = ReportRequests(env.settings, env.store, env.service.router)
    detail, _ = requests.create(
        RequestSpec(tenant="a", subject="s", period="2026-01", template="a-private@1"), actor="test"
    )
    endpoint = WebhookEndpoints(env.store, env.settings.webhooks).create(
        "a", "https://hooks.example.org/a", ["*"], actor="test").endpoint
    location = httpx.get(
        f"{env.base_url}/v1/jobs/{job_id}/artifact", headers={"Authorization": f"Bearer {key}"}
    ).headers["location"]
    return {
        "job_id": job_id,
        "template_id": "a-private",
        "version": "1",
        "request_id": detail.request.id,
        "token": location.removeprefix("/v1/signed/"),
        "name": "console.js",
        "endpoint_id": endpoint.id,
    }


def _call(http: httpx.Client, route: str, values: dict[str, str], who: str) -> httpx.Response:
    method, path = route.split(" ", 1)
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    body: dict[str, Any] = {}
    if route == "POST /v1/jobs":
        return http.post(path, files={"file": ("a.pdf", PDF)})
    if route == "POST /v1/jobs/batch":
        return http.post(path, files=[("file", ("a.pdf", PDF)), ("file", ("b.pdf", PDF))])
    if route == "POST /v1/templates":
        body = {"json": {"id": f"t-{who}", "html": "<p>x</p>", "schema": {"type": "object"}}}
    elif route in ("POST /v1/report-requests", "POST /v1/schedules"):
        body = {"json": {"subject": f"s-{who}", "period": "2026-02", "template": "shared@1", "data": {}}}
    elif route == "POST /v1/webhooks/endpoints":
        body = {"json": {"url": f"https://hooks.example.org/{who}"}}
    elif route in ("POST /console/api/pause", "POST /console/api/resume"):
        body = {"json": {"scope": "raster"}}
    elif route == "POST /console/api/cancel-matching/preview":
        body = {"json": {"state": "queued", "document_class": "no-such-class"}}
    elif route == "POST /console/api/cancel-matching":
        body = {"json": {"ids": ["job_no_such_job"], "reason": "access matrix"}}  # cancels nothing
    elif route == "POST /console/api/class-modes":
        body = {"json": {"document_class": "default", "mode": "vector"}}
    params = {"request_id": "DR-1"} if method == "DELETE" else None
    return http.request(method, path, params=params, **body)


def test_every_route_with_every_role_and_tenant(any_env: ApiEnv) -> None:
    routes = _route_keys(any_env)
    assert routes == set(RULES) | PUBLIC, "a route was added or removed: write down who may call it"
    values = _fixtures(any_env)
    keys = {name: any_env.key(tenant, scopes) if tenant else None for name, tenant, scopes in PRINCIPALS}
    wrong = []
    order = sorted(routes, key=lambda r: r.startswith("DELETE"))  # delete last: it tombstones the job
    for name, tenant, scopes in PRINCIPALS:
        headers = {"Authorization": f"Bearer {keys[name]}"} if keys[name] else {}
        # One connection per request: a route that refuses before reading the body (or a rate limit)
        # may close its connection after answering, and reusing it races that close (seen once as
        # "Connection reset by peer"); this test is about who may call what, not keep-alive.
        with httpx.Client(base_url=any_env.base_url, headers=headers, timeout=30,
                          limits=httpx.Limits(max_keepalive_connections=0)) as http:
            for route in order:
                status = _call(http, route, values, name).status_code
                expected = _expected(route, tenant, scopes)
                if not expected(status):
                    wrong.append(f"{name} {route} -> {status}")
    assert wrong == []


def _expected(route: str, tenant: str | None, scopes: tuple[str, ...]) -> Any:
    if route in PUBLIC:
        return lambda s: s not in (401, 403)
    if tenant is None:
        return lambda s: s == 401
    allowed, scoped, operator_sees = RULES[route]
    if not allowed & set(scopes):
        return lambda s: s == 403
    if scoped and tenant != "a" and not ("operator" in scopes and operator_sees):
        return lambda s: s == 404
    return lambda s: s not in (401, 403, 404)


@pytest.mark.parametrize("scope", ["submit", "read"])
def test_operator_scope_is_issued_alone(env: ApiEnv, scope: str) -> None:
    from docfence.core.errors import InvalidRequest

    with pytest.raises(InvalidRequest):
        env.service.create_api_key("a", ("operator", scope))


def test_worker_hosts_and_pids_are_shown_to_operators_only(env: ApiEnv) -> None:
    # the pid has nine digits: a four-digit one (4242) also turned up, by chance, inside a random hex id
    key = env.key("a", ("read", "submit"))
    with env.client(key) as client:
        job_id = client.submit(PDF).id
    claim = next(c for c in env.store.claim("db7-host-987654321-abcdef", limit=5) if c.job.id == job_id)
    env.store.release(job_id, claim.attempt, "db7-host-987654321-abcdef")
    events = httpx.get(f"{env.base_url}/v1/jobs/{job_id}/events", headers={"Authorization": f"Bearer {key}"})
    assert events.status_code == 200 and "987654321" not in events.text and "db7-host" not in events.text
    aliases = {e["actor"] for e in events.json()["events"] if e["action"] == "lease_acquired"}
    assert aliases == {events.json()["attempts"][0]["worker"]} and aliases.pop().startswith("worker-")
    operator = {"Authorization": f"Bearer {env.key('operators', ('operator',))}"}
    detail = httpx.get(f"{env.base_url}/console/api/jobs/{job_id}", headers=operator).json()
    assert detail["attempts"][0]["worker"] == "db7-host-987654321-abcdef"
