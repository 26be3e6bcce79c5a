"""The console's "Cancel matching…" in Debian's Chromium: with text in the search box, the confirmation
names the jobs the server resolved (count and ids), and confirming cancels exactly those: not a job of
the same state outside the search, nor one that arrived after the confirmation opened."""

from __future__ import annotations

from typing import Any

import pytest

from docfence.core.policy import JobPolicy
from docfence.core.records import Job, NewJob

from .helpers import Served
from .test_console_browser import _sign_in, page  # noqa: F401  (the Chromium page fixture)

pytestmark = pytest.mark.browser


def _labelled(served: Served, label: str, tenant: str = "acme") -> Job:
    job, created = served.store.submit(NewJob(tenant=tenant, policy=JobPolicy(), label=label))
    assert created
    return job


def _states(served: Served, *jobs: Job) -> dict[str, str]:
    return {j.id: served.store.get(j.id).state.value for j in jobs}


def _listed(page: Any) -> list[str]:  # noqa: F811
    ids: list[str] = page.eval_on_selector_all("#confirm-list li", "ls => ls.map(l => l.dataset.jobId)")
    return ids


def test_bulk_cancel_cancels_only_the_searched_jobs_the_confirmation_named(
    page: Any, served: Served  # noqa: F811
) -> None:
    first, second = _labelled(served, "deadline-demo"), _labelled(served, "deadline-demo")
    outside = _labelled(served, "queued-demo")  # queued too, another label: outside the search
    _sign_in(page, served, served.service.create_api_key("acme", ("submit", "read"))[1])
    page.wait_for_selector(f'tr[data-job-id="{outside.id}"]')
    page.fill("#f-job", "deadline-demo")
    page.wait_for_selector(f'tr[data-job-id="{outside.id}"]', state="detached")
    page.click("#bulk-cancel-btn")
    page.wait_for_selector('#confirm-text[data-count="2"]')  # the server's count of the filtered set
    assert sorted(_listed(page)) == sorted([first.id, second.id])
    assert "deadline-demo" in page.inner_text("#confirm-list")
    assert "Cancel these 2 queued or rendering job(s) of your tenant" in page.inner_text("#confirm-text")
    late = _labelled(served, "deadline-demo")  # arrives while the confirmation is open
    page.fill("#confirm-reason", "deadline demo is over")
    page.click("#confirm-ok")
    page.wait_for_selector('#action-msg:has-text("canceled 2 job(s)")')
    page.wait_for_selector(f'tr[data-job-id="{first.id}"][data-state="canceled"]')
    assert _states(served, first, second, outside, late) == {
        first.id: "canceled", second.id: "canceled", outside.id: "queued", late.id: "queued"}
    for job in (first, second):
        event = next(e for e in served.store.audit_events(job.id) if e.to_state == "canceled")
        assert event.actor.startswith("key:") and event.details.get("note") == "deadline demo is over"
    assert [e.action for e in served.store.audit_events(late.id)] == ["submitted"]


def test_an_operator_bulk_cancels_the_searched_jobs_of_every_tenant(page: Any, served: Served) -> None:  # noqa: F811
    acme, other = _labelled(served, "stuck-batch"), _labelled(served, "stuck-batch", tenant="other")
    outside = _labelled(served, "fine", tenant="other")
    record, key = served.service.create_api_key("operators", ("operator",))
    _sign_in(page, served, key)
    page.wait_for_selector(f'tr[data-job-id="{outside.id}"]')
    page.wait_for_selector("#bulk-cancel-btn:not([hidden])")  # operators may cancel now
    page.fill("#f-job", "stuck-batch")
    page.wait_for_selector(f'tr[data-job-id="{outside.id}"]', state="detached")
    page.click("#bulk-cancel-btn")
    page.wait_for_selector('#confirm-text[data-count="2"]')
    assert "across tenants" in page.inner_text("#confirm-text")
    assert sorted(_listed(page)) == sorted([acme.id, other.id])
    assert "tenant other" in page.inner_text("#confirm-list")
    page.click("#confirm-ok")
    page.wait_for_selector('#confirm-msg:has-text("reason")')  # an operator always says why
    page.fill("#confirm-reason", "stuck after the outage")
    page.click("#confirm-ok")
    page.wait_for_selector('#action-msg:has-text("canceled 2 job(s)")')
    assert _states(served, acme, other, outside) == {acme.id: "canceled", other.id: "canceled",
                                                     outside.id: "queued"}
    event = next(e for e in served.store.audit_events(other.id) if e.to_state == "canceled")
    assert (event.actor, event.details.get("note")) == (f"key:{record.id}", "stuck after the outage")
