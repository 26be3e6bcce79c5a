"""An operator acts on overdue work from the console, in Debian's Chromium: cancels another tenant's
job and retries another tenant's failed report from the job page, each only with a reason, audited as
the operator's key."""

from __future__ import annotations

from typing import Any

import pytest

from docfence.engines.report.bundle import TemplateBundle
from docfence.reports import ReportRequests, RequestSpec, Templates

from .helpers import Served, submit
from .test_console_browser import _sign_in, page  # noqa: F401  (the Chromium page fixture)

pytestmark = pytest.mark.browser


def test_an_operator_cancels_and_retries_a_tenants_work_with_reasons(page: Any, served: Served) -> None:  # noqa: F811
    bundle = TemplateBundle(name="t", html="<p>x</p>", css="", assets={}, schema={"type": "object"})
    Templates(served.store).create_version("acme-t", bundle, actor="test", owner="acme")
    requests = ReportRequests(served.settings, served.store, served.service.router)
    spec = RequestSpec(tenant="acme", subject="s", period="2026-01", template="acme-t@1")
    report = requests.create(spec, actor="test")[0].jobs[-1]
    claim = next(c for c in served.store.claim("w1", limit=10) if c.job.id == report.id)
    served.store.fail(report.id, claim.attempt, "w1", "lease_expired", "attempts exhausted", retryable=False)
    stuck = submit(served.store, tenant="other").id
    record, key = served.service.create_api_key("operators", ("operator",))
    _sign_in(page, served, key)
    page.click(f'tr[data-job-id="{stuck}"]')
    page.wait_for_selector("#cancel-btn:not([hidden])")
    page.click("#cancel-btn")
    page.fill("#confirm-reason", "overdue after the outage")
    page.click("#confirm-ok")
    page.wait_for_selector('#job-summary dd[data-state="canceled"]')
    page.click("text=← all jobs")
    page.click(f'tr[data-job-id="{report.id}"]')
    page.wait_for_selector("#retry-btn:not([hidden])")
    page.click("#retry-btn")
    page.click("#confirm-ok")
    page.wait_for_selector('#confirm-msg:has-text("reason")')  # an operator always says why
    page.fill("#confirm-reason", "workers are back")
    page.click("#confirm-ok")
    page.wait_for_selector('#action-msg:has-text("retried as job")')
    canceled = next(e for e in served.store.audit_events(stuck) if e.to_state == "canceled")
    assert (canceled.actor, canceled.details.get("note")) == (f"key:{record.id}", "overdue after the outage")
    retry = next(j for j in served.store.request_jobs(report.report_request_id or "") if j.id != report.id)
    noted = [(e.actor, e.details.get("note")) for e in served.store.audit_events(retry.id)
             if e.action == "retry_requested"]
    assert noted == [(f"key:{record.id}", "workers are back")] and retry.tenant == "acme"
