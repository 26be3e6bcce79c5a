"""The console in Debian's Chromium (headless, never downloaded): a submitted job goes from queued to
succeeded under a real worker, its timeline opens; without a key the console refuses."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from docfence.blobs.regions import RegionRouter
from docfence.core.clock import FakeClock
from docfence.reports import ReportRequests, RequestSpec, Templates
from docfence.reports.templates import TemplateBundle
from docfence.samples import pdfs
from docfence.store.base import open_store
from docfence.testing.servers import running
from docfence.worker.runner import Worker

from .helpers import Served, console_app, make_settings, submit

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# Every wait below ends on what the page shows; this only stops a broken build from hanging (a
# starved 2-core machine runs Chromium, the server and a render at once, so it is generous).
HANG_GUARD_MS = 120_000


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = context.new_page()
    outside: list[str] = []
    pg.on("request", lambda r: None if r.url.startswith(served.base_url) else outside.append(r.url))
    pg.set_default_timeout(HANG_GUARD_MS)
    try:
        yield pg
    finally:
        context.close()
    assert outside == [], f"the console fetched from outside the server: {outside}"


@pytest.fixture
def start_worker(served: Served) -> Iterator[Callable[[], Worker]]:
    """Starts a real worker (render child, lease keeper) over its own store connection when called."""
    store = open_store(served.settings.database_url)
    regions = RegionRouter.from_config(served.settings.region_urls())
    w = Worker(served.settings, store, regions, worker_id="w-ui")
    thread = threading.Thread(target=w.run, name="worker", daemon=True)

    def start() -> Worker:
        thread.start()
        return w

    try:
        yield start
    finally:
        w.stopping.set()
        if thread.is_alive():
            thread.join(30)
        store.close()


def _submit(served: Served) -> str:
    key = served.service.create_api_key("acme", ("submit",))[1]
    resp = httpx.post(f"{served.base_url}/v1/jobs", headers={"Authorization": f"Bearer {key}"},
                      files={"file": ("in.pdf", pdfs.many_pages(2), "application/pdf")},
                      timeout=HANG_GUARD_MS / 1000)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def test_console_follows_a_job_from_queued_to_succeeded(
    page: Any, served: Served, start_worker: Callable[[], Worker]
) -> None:
    job_id = _submit(served)
    admin = served.service.create_api_key("ops", ("operator",))[1]
    page.goto(f"{served.base_url}/console")
    page.fill("#key", admin)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector(f'tr[data-job-id="{job_id}"][data-state="queued"]')
    assert page.inner_text('.card.queued .n') == "1"
    start_worker()
    page.wait_for_selector(f'tr[data-job-id="{job_id}"][data-state="succeeded"]')
    page.wait_for_selector('.card.succeeded .n:text-is("1")')  # selectors, not functions: the CSP bans eval
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console-overview.png"), full_page=True)
    page.click(f'tr[data-job-id="{job_id}"]')
    page.wait_for_selector('#timeline li[data-action="artifact_committed"]')
    actions = page.eval_on_selector_all("#timeline li", "els => els.map(e => e.dataset.action)")
    assert actions[:3] == ["submitted", "lease_acquired", "artifact_committed"]
    assert "terminal: succeeded" in page.inner_text("#next-steps")
    assert "w-ui" in page.inner_text("#attempts")
    assert "watermark" in page.inner_text("#validation")
    page.screenshot(path=str(ARTIFACTS / "console-job-timeline.png"), full_page=True)
    assert admin not in page.content()  # the key is sent as a header, never rendered
    assert page.evaluate("sessionStorage.getItem('docfence.console.key')") == admin


def test_console_prompts_for_a_key_then_refuses_bad_ones(page: Any, served: Served) -> None:
    page.goto(f"{served.base_url}/console")
    page.wait_for_selector("#login:not([hidden])")  # first visit: a prompt, not a refusal
    assert page.is_hidden("#refusal") and page.is_hidden("#overview") and page.is_visible("#key")
    page.fill("#key", "dfk_not-a-key")
    page.click("#key-form button[type=submit]")
    page.wait_for_selector('#refusal-text:has-text("Refused (401)")')
    assert page.is_hidden("#overview") and page.is_visible("#key")
    submit_only = served.service.create_api_key("acme", ("submit",))[1]
    page.fill("#key", submit_only)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector('#refusal-text:has-text("Refused (403)")')
    assert page.is_hidden("#overview")


def _sign_in(page: Any, served: Served, key: str) -> None:
    page.goto(f"{served.base_url}/console")
    page.fill("#key", key)
    page.click("#key-form button[type=submit]")


def test_tenant_admin_cancels_then_deletes_a_job_with_request_id_and_reasons(page: Any,
                                                                              served: Served) -> None:
    job_id = _submit(served)
    reader = served.service.create_api_key("acme", ("read",))[1]
    _sign_in(page, served, reader)
    page.click(f'tr[data-job-id="{job_id}"]')
    page.wait_for_selector('#job-summary dd[data-state="queued"]')
    assert page.is_hidden("#cancel-btn") and page.is_hidden("#delete-btn")  # a read key may not act
    page.click("#logout")
    _sign_in(page, served, served.service.create_api_key("acme", ("admin",))[1])
    page.click(f'tr[data-job-id="{job_id}"]')
    page.wait_for_selector("#cancel-btn:not([hidden])")
    page.click("#cancel-btn")
    assert page.is_hidden("#confirm-request-label")  # a cancel asks only why
    page.click("#confirm-ok")
    page.wait_for_selector('#confirm-msg:has-text("reason")')  # a reason is required
    page.fill("#confirm-reason", "sent to the wrong clinic")
    page.click("#confirm-ok")
    page.wait_for_selector('#job-summary dd[data-state="canceled"]')
    assert "is canceled" in page.inner_text("#action-msg") and page.is_hidden("#cancel-btn")
    page.wait_for_selector('#timeline li[data-action="cancel_requested"]:has-text("the wrong clinic")')
    page.click("#delete-btn")
    page.fill("#confirm-request", "not a request id!")  # refused in the page: the API would 422
    page.fill("#confirm-reason", "patient withdrew consent")
    page.click("#confirm-ok")
    page.wait_for_selector('#confirm-msg:has-text("deletion request")')
    page.fill("#confirm-request", "DSR-2026-114")
    page.click("#confirm-ok")
    page.wait_for_selector('#action-msg:has-text("deleted (request DSR-2026-114)")')
    page.wait_for_selector('#timeline li[data-action="bytes_deleted"]')  # the same render hides the button
    assert page.is_hidden("#delete-btn")
    events = served.store.audit_events(job_id)
    assert served.store.get(job_id).deleted_at is not None
    cancel = next(e for e in events if e.action == "cancel_requested")
    assert cancel.details.get("note") == "sent to the wrong clinic"
    tomb = next(e for e in events if e.action == "bytes_deletion")
    assert {k: v for k, v in tomb.details.items() if k != "kek_fingerprint"} == {
        "request_id": "DSR-2026-114", "note": "patient withdrew consent", "key_destroyed": True}


def test_operator_pauses_and_resumes_claims_with_confirmation_and_reason(page: Any, served: Served) -> None:
    _sign_in(page, served, served.service.create_api_key("ops", ("operator",))[1])
    page.wait_for_selector("#admin:not([hidden])")
    page.select_option("#pause-scope", "raster")
    page.click("#pause-btn")
    page.wait_for_selector("#confirm:not([hidden])")
    assert served.store.paused_scopes() == []  # nothing happens before the confirmation
    page.click("#confirm-ok")
    page.wait_for_selector('#confirm-msg:has-text("reason")')  # a reason is required
    page.fill("#confirm-reason", "raster engine rollback")
    page.click("#confirm-ok")
    page.wait_for_selector('#admin-msg:has-text("paused now: raster")')
    page.wait_for_selector('#status-line:has-text("raster engine rollback")')  # who, when and why
    assert "claims paused: raster (by key:" in page.inner_text("#status-line")
    page.click("#resume-btn")
    page.fill("#confirm-reason", "rollback done")
    page.click("#confirm-ok")
    page.wait_for_selector('#admin-msg:has-text("paused now: nothing")')
    ops = [(e.action, e.reason) for e in served.store.iter_audit() if e.action.startswith("claims_")]
    assert ops == [("claims_paused", "raster engine rollback"), ("claims_resumed", "rollback done")]
    assert served.store.paused_scopes() == []


@pytest.fixture
def clocked(tmp_path: Path) -> Iterator[tuple[Served, FakeClock]]:
    """A served console whose store and service read a clock the test moves."""
    clock = FakeClock()
    settings = make_settings(tmp_path)
    store = open_store(settings.database_url, clock=clock)
    app, service = console_app(settings, store, clock)
    try:
        with running(app) as url:
            yield Served(settings, store, service, url), clock
    finally:
        store.close()


def test_rows_show_kind_lease_holder_and_highlight_expired_leases_and_overdue_jobs(
    browser: Any, clocked: tuple[Served, FakeClock]
) -> None:
    served, clock = clocked
    stuck = submit(served.store).id
    assert served.store.claim("db7-host-987654321-abcdef", limit=1)[0].job.id == stuck
    clock.advance(10 * 24 * 3600)  # past the lease and the deadline: the worker vanished
    fresh = submit(served.store).id
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(HANG_GUARD_MS)
    try:
        _sign_in(page, served, served.service.create_api_key("acme", ("read",))[1])
        row = f'tr[data-job-id="{stuck}"]'
        page.wait_for_selector(f'{row}.lease-expired.overdue[data-lease-expired="1"][data-overdue="1"]')
        text = page.inner_text(row)
        assert "watermark" in text and "expired" in text and "overdue by" in text
        assert "987654321" not in text and "worker-" in text  # a tenant key sees the holder's alias
        assert page.get_attribute(f'tr[data-job-id="{fresh}"]', "class") == ""
        assert page.get_attribute(f'tr[data-job-id="{fresh}"]', "data-overdue") == "0"
        page.click("#logout")
        _sign_in(page, served, served.service.create_api_key("ops", ("operator",))[1])
        page.wait_for_selector(f'{row} td:has-text("db7-host-987654321-abcdef")')  # operators see the host
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "console-highlights.png"), full_page=True)
    finally:
        context.close()


def test_search_by_job_id_finds_only_jobs_the_key_may_see(page: Any, served: Served) -> None:
    mine, other, theirs = (submit(served.store).id, submit(served.store).id,
                           submit(served.store, tenant="other").id)
    _sign_in(page, served, served.service.create_api_key("acme", ("read",))[1])
    page.wait_for_selector(f'tr[data-job-id="{other}"]')
    page.fill("#f-job", mine)
    page.wait_for_selector(f'tr[data-job-id="{other}"]', state="detached")
    assert page.eval_on_selector_all("#jobs tbody tr", "rs => rs.map(r => r.dataset.jobId)") == [mine]
    page.fill("#f-job", theirs)  # another tenant's job is not found, as on /v1
    page.wait_for_selector("#jobs-empty:not([hidden])")
    assert page.eval_on_selector_all("#jobs tbody tr", "rs => rs.length") == 0


def test_tenant_retries_a_canceled_report_from_its_job_page(page: Any, served: Served) -> None:
    bundle = TemplateBundle(name="t", html="<p>x</p>", css="", assets={}, schema={"type": "object"})
    Templates(served.store).create_version("acme-t", bundle, actor="test", owner="acme")
    requests = ReportRequests(served.settings, served.store, served.service.router)
    spec = RequestSpec(tenant="acme", subject="s", period="2026-01", template="acme-t@1")
    detail, _ = requests.create(spec, actor="test")
    first = detail.jobs[-1].id
    served.store.cancel(first, actor="test")
    _sign_in(page, served, served.service.create_api_key("acme", ("submit", "read"))[1])
    page.click(f'tr[data-job-id="{first}"]')
    page.wait_for_selector("#retry-btn:not([hidden])")
    assert page.is_hidden("#delete-btn")  # submit+read is not the tenant admin
    page.click("#retry-btn")
    page.click("#confirm-ok")
    page.wait_for_selector('#action-msg:has-text("retried as job")')
    message = page.inner_text("#action-msg")
    unrelated = submit(served.store).id
    page.click("text=← all jobs")
    page.wait_for_selector(f'tr[data-job-id="{unrelated}"]')
    page.fill("#f-job", detail.request.id)  # the label column: both jobs of the request, nothing else
    page.wait_for_selector(f'tr[data-job-id="{unrelated}"]', state="detached")
    shown = page.eval_on_selector_all("#jobs tbody tr", "rs => rs.map(r => r.dataset.jobId)")
    jobs = [j for j in served.store.list_jobs(tenant="acme") if j.report_request_id == detail.request.id]
    retried = [j for j in jobs if j.id != first]
    assert len(retried) == 1 and retried[0].state.value == "queued" and retried[0].parent_job_id == first
    assert retried[0].id in message
    assert shown == [retried[0].id, first]


def test_bulk_cancel_cancels_the_filtered_jobs_of_the_keys_tenant_only(page: Any, served: Served) -> None:
    vector, raster = submit(served.store).id, submit(served.store, mode="raster").id
    theirs = submit(served.store, tenant="other", mode="raster").id
    _sign_in(page, served, served.service.create_api_key("acme", ("submit", "read"))[1])
    page.wait_for_selector(f'tr[data-job-id="{vector}"]')
    page.select_option("#f-mode", "raster")
    page.wait_for_selector(f'tr[data-job-id="{vector}"]', state="detached")
    page.click("#bulk-cancel-btn")
    assert "1 shown" in page.inner_text("#confirm-text")
    page.fill("#confirm-reason", "raster rollback")
    page.click("#confirm-ok")
    page.wait_for_selector('#action-msg:has-text("canceled 1 job(s)")')
    page.wait_for_selector(f'tr[data-job-id="{raster}"][data-state="canceled"]')
    states = {j: served.store.get(j).state.value for j in (vector, raster, theirs)}
    assert states == {vector: "queued", raster: "canceled", theirs: "queued"}
    canceled = next(e for e in served.store.audit_events(raster) if e.to_state == "canceled")
    assert canceled.actor.startswith("key:")  # audited as the console user's key
    assert canceled.details.get("note") == "raster rollback"


def test_pages_through_older_jobs_with_the_cursor(browser: Any, clocked: tuple[Served, FakeClock]) -> None:
    served, clock = clocked
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        _pages_through(context.new_page(), served, clock)
    finally:
        context.close()


def _pages_through(page: Any, served: Served, clock: FakeClock) -> None:
    page.set_default_timeout(HANG_GUARD_MS)
    ids = []
    for i in range(13):  # one per second, but jobs 2 and 3 share an instant: the page ends inside the tie
        ids.append(submit(served.store).id)
        if i != 2:
            clock.advance(1)
    newest_first = [j.id for j in served.store.list_jobs(limit=100)]
    assert set(newest_first[9:11]) == {ids[2], ids[3]}
    _sign_in(page, served, served.service.create_api_key("acme", ("read",))[1])
    page.wait_for_selector(f'tr[data-job-id="{newest_first[0]}"]')
    page.select_option("#page-size", "10")
    page.wait_for_selector(f'tr[data-job-id="{newest_first[10]}"]', state="detached")
    shown = page.eval_on_selector_all("#jobs tbody tr", "rs => rs.map(r => r.dataset.jobId)")
    assert shown == newest_first[:10]
    page.click("#next-page")
    page.wait_for_selector('#page-info:has-text("page 2 (last)")')
    shown = page.eval_on_selector_all("#jobs tbody tr", "rs => rs.map(r => r.dataset.jobId)")
    assert shown == newest_first[10:] and len(shown) == 3 and page.is_disabled("#next-page")
    page.click("#first-page")
    page.wait_for_selector(f'tr[data-job-id="{newest_first[0]}"]')
    assert page.inner_text("#page-info") == "page 1"
