"""RFC 9110 on every path: a 405 and an OPTIONS answer list in `Allow` every method the path takes, not
only those of the first route that matched (GET and POST of one path are two FastAPI routes)."""

from __future__ import annotations

import re

import httpx

from .conftest import ApiEnv

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _concrete(template: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", template)  # a value every path parameter's pattern takes


def _allow(answer: httpx.Response) -> set[str]:
    return {m.strip() for m in answer.headers.get("allow", "").split(",") if m.strip()}


def test_every_documented_path_lists_all_its_methods_on_options_and_405(env: ApiEnv) -> None:
    paths = httpx.get(f"{env.base_url}/openapi.json").json()["paths"]
    two_methods = [p for p, ops in paths.items() if len(ops) > 1]
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/templates", "/v1/schedules", "/v1/webhooks/endpoints",
            "/v1/verify/{job_id}"} <= set(two_methods)
    checked = 0
    for template, operations in paths.items():
        url = env.base_url + _concrete(template)
        documented = {m.upper() for m in operations}
        options = httpx.request("OPTIONS", url)  # no key: a preflight never carries one
        assert options.status_code == 204, (template, options.status_code, options.text)
        assert _allow(options) == documented | {"OPTIONS"}, template
        for method in (m for m in METHODS if m not in documented):
            refused = httpx.request(method, url)
            if refused.status_code == 401:  # another route's template takes this method: see below
                continue
            assert refused.status_code == 405, (template, method, refused.status_code)
            assert _allow(refused) == documented | {"OPTIONS"}, (template, method)
            assert refused.json()["error"]["code"] == "method_not_allowed"
            checked += 1
    assert checked > len(paths)


def test_a_literal_path_is_its_own_resource_where_a_template_also_matches(env: ApiEnv) -> None:
    key = env.key()
    answer = httpx.get(f"{env.base_url}/v1/jobs/batch", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 405 and _allow(answer) == {"POST", "OPTIONS"}
    assert _allow(httpx.request("OPTIONS", f"{env.base_url}/v1/jobs/batch")) == {"POST", "OPTIONS"}


def test_paths_outside_the_document_answer_too_and_unknown_paths_stay_404(env: ApiEnv) -> None:
    for path, methods in (("/console", {"GET"}), ("/metrics", {"GET"}), ("/docs", {"GET"}),
                          ("/console/api/cancel-matching", {"POST"})):
        answer = httpx.request("OPTIONS", env.base_url + path)
        assert answer.status_code == 204 and _allow(answer) == methods | {"OPTIONS"}, path
        refused = httpx.request("PUT", env.base_url + path)
        assert refused.status_code == 405 and _allow(refused) == methods | {"OPTIONS"}, path
    assert httpx.request("OPTIONS", f"{env.base_url}/v1/no-such-thing").status_code == 404
