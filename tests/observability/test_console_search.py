"""The console's search box finds jobs by label and by original filename (exact, within the key's
tenant, paged like the table), and the table shows both; the JSON endpoint and Debian's Chromium."""

from __future__ import annotations

import httpx
import pytest

from docfence.core.policy import JobPolicy
from docfence.core.records import Job, NewJob

from .helpers import Served
from .test_console_browser import _sign_in, page  # noqa: F401  (the Chromium page fixture)


def _labelled(served: Served, label: str | None, filename: str | None, tenant: str = "acme") -> Job:
    job, _ = served.store.submit(NewJob(tenant=tenant, policy=JobPolicy(), label=label, filename=filename))
    return job


def _ids(http: httpx.Client, **params: object) -> list[str]:
    answer = http.get("/console/api/jobs", params=params)
    assert answer.status_code == 200, answer.text
    return [row["id"] for row in answer.json()["jobs"]]


def test_search_by_label_then_filename_within_the_tenant(served: Served) -> None:
    a = _labelled(served, "invoices", "scan-1.pdf")
    b = _labelled(served, "invoices", "scan-2.pdf")
    c = _labelled(served, None, "invoices")  # a filename equal to a label: the label wins
    _labelled(served, "invoices", "scan-1.pdf", tenant="other")
    key = served.service.create_api_key("acme", ("read",))[1]
    with httpx.Client(base_url=served.base_url, headers={"Authorization": f"Bearer {key}"}) as http:
        assert _ids(http, job_id="invoices") == [b.id, a.id]
        assert _ids(http, job_id=" scan-1.pdf ") == [a.id]
        first = http.get("/console/api/jobs", params={"job_id": "invoices", "limit": 1}).json()
        assert [r["id"] for r in first["jobs"]] == [b.id] and first["next_cursor"]
        assert _ids(http, job_id="invoices", limit=1, cursor=first["next_cursor"]) == [a.id]
        row = http.get("/console/api/jobs", params={"job_id": a.id}).json()["jobs"][0]
        assert (row["label"], row["filename"]) == ("invoices", "scan-1.pdf")
        assert _ids(http, job_id="nothing-like-this") == []
    assert c.filename == "invoices"


@pytest.mark.browser
def test_search_box_finds_a_label_and_a_filename(page, served: Served) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a = _labelled(served, "q4-close", "ledger.pdf")
    b = _labelled(served, None, "contract.pdf")
    _sign_in(page, served, served.service.create_api_key("acme", ("read",))[1])
    page.wait_for_selector(f'tr[data-job-id="{b.id}"]')
    page.fill("#f-job", "q4-close")
    page.wait_for_selector(f'tr[data-job-id="{b.id}"]', state="detached")
    assert page.eval_on_selector_all("#jobs tbody tr", "rs => rs.map(r => r.dataset.jobId)") == [a.id]
    assert page.inner_text(f'tr[data-job-id="{a.id}"] td.filename') == "ledger.pdf"
    page.fill("#f-job", "contract.pdf")
    page.wait_for_selector(f'tr[data-job-id="{a.id}"]', state="detached")
    assert page.eval_on_selector_all("#jobs tbody tr", "rs => rs.map(r => r.dataset.jobId)") == [b.id]
