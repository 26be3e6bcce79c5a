"""The console's job view (Debian's Chromium) shows a webhook delivery attempt on the job's timeline:
its event type, receiver host, outcome and HTTP status."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from docfence.config import WebhooksConfig
from docfence.core.records import ArtifactInfo
from docfence.maintenance.webhook_endpoints import WebhookEndpoints
from docfence.maintenance.webhooks import WebhookDispatcher
from docfence.testing.webhook_receiver import Receiver, receiving

from .helpers import Served, submit

pytestmark = pytest.mark.browser
HANG_GUARD_MS = 120_000  # only stops a broken build from hanging; every wait ends on what the page shows
CONFIG = WebhooksConfig(allow_hosts=("127.0.0.1",))


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(HANG_GUARD_MS)
    try:
        yield pg
    finally:
        context.close()


def test_the_job_view_shows_webhook_attempts(page: Any, served: Served) -> None:
    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        receiver.secret = WebhookEndpoints(served.store, CONFIG).create("acme", url, ["*"], actor="t").secret
        job = submit(served.store)
        (claim,) = served.store.claim("w1")
        served.store.complete(job.id, claim.attempt, "w1", ArtifactInfo("k", "ab" * 32, 10, 1, {"ok": True}))
        assert len(WebhookDispatcher(served.store, CONFIG, worker="d1").run_once().delivered) == 1
    key = served.service.create_api_key("acme", ("read",))[1]
    page.goto(f"{served.base_url}/console")
    page.fill("#key", key)
    page.click("#key-form button[type=submit]")
    page.click(f'tr[data-job-id="{job.id}"]')
    page.wait_for_selector('#timeline li[data-action="webhook_attempt"]')
    text = page.inner_text('#timeline li[data-action="webhook_attempt"]')
    assert "job.succeeded" in text and "127.0.0.1" in text and "delivered HTTP 204" in text
