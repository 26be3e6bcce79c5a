"""`/docs` works offline: Swagger UI comes from the package, every file the page loads is served by
docfence itself under a same-origin CSP, and Chromium renders the operations without any outside
request (it used to load Swagger UI from a public CDN and showed a blank page offline)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from docfence.api.docs import CSP

from .conftest import ApiEnv, api_env


def test_docs_page_loads_only_same_origin_files(env: ApiEnv) -> None:
    with httpx.Client(base_url=env.base_url, timeout=30) as http:
        page = http.get("/docs")
        assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
        assert "default-src 'none'" in CSP and "script-src 'self'" in CSP
        refs = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert refs and all(ref.startswith("/docs/static/") for ref in refs)
        for ref in refs:
            assert http.get(ref).status_code == 200, ref
        assert http.get("/docs/static/../app.py").status_code == 404
        assert http.get("/docs/static/index.html").status_code == 404
        assert http.get("/redoc").status_code == 404


def test_docs_can_be_switched_off(tmp_path: Path) -> None:
    from docfence.config import ServerConfig

    with api_env(tmp_path, server=ServerConfig(docs=False)) as env:
        assert httpx.get(f"{env.base_url}/docs").status_code == 404
        assert httpx.get(f"{env.base_url}/openapi.json").status_code == 200


@pytest.mark.browser
def test_swagger_ui_renders_offline_in_chromium(env: ApiEnv, browser: Any) -> None:
    context = browser.new_context()
    page = context.new_page()
    outside: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(env.base_url) else outside.append(r.url))
    page.set_default_timeout(30_000)
    try:
        page.goto(f"{env.base_url}/docs")
        page.wait_for_selector(".opblock-summary-path[data-path='/v1/jobs/{job_id}/artifact']")
    finally:
        context.close()
    assert outside == []
