"""The console offers "Retry report…" only where a retry may end otherwise: for a report whose job failed
with a template error the job page hides it and says why (the refusal `POST .../retry` would answer);
for a failure another try may not repeat it offers it. The JSON endpoint and Debian's Chromium."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from docfence.core.records import Job
from docfence.engines.report.bundle import TemplateBundle
from docfence.reports import ReportRequests, RequestSpec, Templates

from .helpers import Served
from .test_console_browser import _sign_in, page  # noqa: F401  (the Chromium page fixture)


def _failed_report(served: Served, subject: str, code: str, message: str) -> Job:
    bundle = TemplateBundle(name="t", html="<p>x</p>", css="", assets={}, schema={"type": "object"})
    Templates(served.store).create_version("acme-t", bundle, actor="test", owner="acme")
    requests = ReportRequests(served.settings, served.store, served.service.router)
    spec = RequestSpec(tenant="acme", subject=subject, period="2026-01", template="acme-t@1")
    job = requests.create(spec, actor="test")[0].jobs[-1]
    claim = next(c for c in served.store.claim("w1", limit=10) if c.job.id == job.id)
    return served.store.fail(job.id, claim.attempt, "w1", code, message, retryable=False)


def test_the_job_detail_says_whether_and_why_not_a_retry(served: Served) -> None:
    broken = _failed_report(served, "clinic-1", "template_error", "template used an undefined name 'x'")
    crashed = _failed_report(served, "clinic-2", "lease_expired", "attempts exhausted")
    key = served.service.create_api_key("acme", ("submit", "read"))[1]
    reader = served.service.create_api_key("acme", ("read",))[1]
    with httpx.Client(base_url=served.base_url, timeout=30) as http:
        offer = http.get(f"/console/api/jobs/{broken.id}", headers={"Authorization": f"Bearer {key}"}).json()
        assert offer["retry"]["offered"] is False and offer["retry"]["code"] == "retry_would_fail"
        assert "undefined name 'x'" in offer["retry"]["why"]
        again = http.get(f"/console/api/jobs/{crashed.id}", headers={"Authorization": f"Bearer {key}"}).json()
        assert again["retry"] == {"offered": True, "why": None, "code": None}
        read_only = http.get(f"/console/api/jobs/{crashed.id}", headers={"Authorization": f"Bearer {reader}"})
        assert read_only.json()["retry"]["offered"] is False  # not this key's to retry


@pytest.mark.browser
def test_retry_is_hidden_with_the_reason_for_a_template_error(page: Any, served: Served) -> None:  # noqa: F811
    broken = _failed_report(served, "clinic-1", "template_error", "template used an undefined name 'x'")
    crashed = _failed_report(served, "clinic-2", "lease_expired", "attempts exhausted")
    _sign_in(page, served, served.service.create_api_key("acme", ("submit", "read"))[1])
    page.click(f'tr[data-job-id="{broken.id}"]')
    page.wait_for_selector('#retry-why:not([hidden])[data-code="retry_would_fail"]')
    assert page.is_hidden("#retry-btn")
    why = page.inner_text("#retry-why")
    assert why.startswith("No retry: ") and "template_error" in why and "undefined name 'x'" in why
    page.click("text=← all jobs")
    page.click(f'tr[data-job-id="{crashed.id}"]')
    page.wait_for_selector("#retry-btn:not([hidden])")
    assert page.is_hidden("#retry-why")
