"""The API counts and times every request by route template and status (requests refused before
routing as "unrouted"), and never puts a raw path (a job id, a signed URL's token) into a label."""

from __future__ import annotations

import re

import httpx

from .conftest import PDF, ApiEnv


def _count(text: str, method: str, route: str, status: str) -> float:
    pattern = (rf'^docfence_http_requests_total\{{method="{method}",route="{re.escape(route)}",'
               rf'status="{status}"\}} (\S+)$')
    match = re.search(pattern, text, re.M)
    return float(match.group(1)) if match else 0.0


def test_requests_are_counted_by_route_template_and_status(env: ApiEnv) -> None:
    key = env.key()
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=env.base_url, timeout=30) as http:
        before = http.get("/metrics").text
        assert http.get("/v1/jobs/job_nope", headers={"Authorization": "Bearer dfk_wrong"}).status_code == 401
        created = http.post("/v1/jobs", headers=auth, files={"file": ("a.pdf", PDF)})
        assert created.status_code == 201
        job_id = created.json()["id"]
        assert http.get(f"/v1/jobs/{job_id}", headers=auth).status_code == 200
        assert http.get("/no/such/path", headers=auth).status_code == 404
        after = http.get("/metrics").text
    for method, route, status in (("GET", "unrouted", "401"), ("POST", "/v1/jobs", "201"),
                                  ("GET", "/v1/jobs/{job_id}", "200"), ("GET", "unrouted", "404")):
        assert _count(after, method, route, status) == _count(before, method, route, status) + 1, route
    assert job_id not in after and "dfk_" not in after
    assert 'docfence_http_request_duration_seconds_count{method="POST",route="/v1/jobs"}' in after
