"""The console's job view in Debian's Chromium says what `docfence inspect` says about encryption at
rest: a sealed job's key provider and key-encryption key fingerprint, and `plaintext` for a job stored
before encryption (from the job detail JSON, drawn by console.js)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from docfence.core.ids import new_id
from docfence.core.records import NewJob, key_fingerprint
from docfence.samples import pdfs
from docfence.storage_keys import input_key

from .helpers import Served

pytestmark = pytest.mark.browser
HANG_GUARD_MS = 120_000  # only stops a broken build from hanging; every wait ends on what the page shows


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(HANG_GUARD_MS)
    try:
        yield pg
    finally:
        context.close()


def _sealed_job(served: Served) -> str:
    key = served.service.create_api_key("acme", ("submit",))[1]
    resp = httpx.post(f"{served.base_url}/v1/jobs", headers={"Authorization": f"Bearer {key}"},
                      files={"file": ("in.pdf", pdfs.many_pages(1), "application/pdf")},
                      timeout=HANG_GUARD_MS / 1000)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def _legacy_job(served: Served) -> str:
    policy = served.settings.policy_for("default")
    job_id = new_id()
    info = served.service.router.for_region(policy.region).put(input_key("acme", job_id), pdfs.many_pages(1))
    served.store.submit(NewJob(tenant="acme", policy=policy, input_key=info.key, input_sha256=info.sha256,
                               input_bytes=info.bytes, job_id=job_id))
    return job_id


def _summary(page: Any, job_id: str) -> str:
    page.evaluate(f"location.hash = '#/job/{job_id}'")
    page.wait_for_selector(f'#job-title:text-is("Job {job_id}")')  # the page's fields are set together
    return str(page.inner_text("#job-summary"))


def test_the_job_view_shows_sealed_and_plaintext_jobs(page: Any, served: Served) -> None:
    sealed, legacy = _sealed_job(served), _legacy_job(served)
    row = served.store.get(sealed)
    assert row.data_key_provider == "local" and row.data_key_kek_id
    reader = served.service.create_api_key("acme", ("read",))[1]
    page.goto(f"{served.base_url}/console")
    page.fill("#key", reader)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#overview:not([hidden])")
    summary = _summary(page, sealed)
    assert f"sealed, provider local, kek {key_fingerprint('local', row.data_key_kek_id)}" in summary, summary
    assert row.data_key_kek_id not in page.content()
    summary = _summary(page, legacy)
    assert "plaintext (stored before encryption at rest)" in summary, summary
