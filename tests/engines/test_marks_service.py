"""Marks through the service and a real worker on both stores: the recipient is drawn, stored on the job
and in its submitted audit event, hidden from keys without `jobs.recipient`, and never logged (the
API, service and worker logs and the render processes' output are all captured)."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest

from docfence.blobs.regions import RegionRouter
from docfence.config import DocumentClass, Settings, WorkerConfig
from docfence.core.errors import InvalidWatermark
from docfence.core.marks import HIDDEN, MarkRules
from docfence.core.policy import WatermarkSpec
from docfence.core.states import JobState
from docfence.samples.pdfs import many_pages
from docfence.service import Principal, Service, SubmitRequest
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.worker.runner import Worker

RECIPIENT = "Dr. Zebulon Quartermain"
FOOTER = {"text": "{recipient} · {date} · {job_id} · {page}/{pages}", "position": "footer", "opacity": 0.8}
CLASS = DocumentClass("external", mark_rules=MarkRules(
    marks=(WatermarkSpec.from_mapping(FOOTER),), timezone="Europe/Berlin",
    allowed_fields=("recipient", "purpose", "date", "job_id", "page", "pages")))


def _settings(tmp_path: Path) -> Settings:
    classes = {"external": CLASS, "default": DocumentClass("default")}
    return Settings(storage_url=f"file://{tmp_path / 'objects'}", classes=classes,
                    worker=WorkerConfig(poll_interval_s=3600.0, reconcile_in_process=False),
                    limits=LONG_BUDGET_LIMITS)


def _service(store: Any, settings: Settings) -> Service:
    regions = RegionRouter.from_config(settings.region_urls())
    return Service(settings, store, regions, signing_secret=b"k" * 32)


def test_the_recipient_is_drawn_stored_audited_and_never_logged(  # type: ignore[no-untyped-def]
    store, tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = _settings(tmp_path)
    service = _service(store, settings)
    submitter = Principal("k1", "acme", ("submit", "read"))
    job, _ = service.submit(submitter, io.BytesIO(many_pages(3)), SubmitRequest(
        document_class="external", recipient=RECIPIENT, purpose="second opinion"))
    assert job.policy.fields is not None and job.policy.fields["recipient"] == RECIPIENT
    assert job.policy.fields["date"] == service.clock.now().astimezone(
        __import__("zoneinfo").ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%d")
    Worker(settings, store, RegionRouter.from_config(settings.region_urls())).run(until_idle=True)
    done = store.get(job.id)
    assert done.state is JobState.SUCCEEDED, done.last_error_message
    report = store.artifact(job.id).validation
    structure = next(c for c in report["checks"] if c["name"] == "watermark_structure")
    assert report["ok"] and structure["marks"] == 2

    events, _ = service.events(submitter, job.id)
    submitted = events[0].details
    assert submitted["recipient"] == RECIPIENT and submitted["purpose"] == "second opinion"
    reader = Principal("k2", "acme", ("read",))
    assert service.events(reader, job.id)[0][0].details["recipient"] == HIDDEN
    assert service.get(reader, job.id).recipient_visible is False
    assert service.get(submitter, job.id).recipient_visible is True

    logged = [r.getMessage() + repr(r.__dict__) for r in caplog.records]
    out, err = capfd.readouterr()
    assert logged and all(RECIPIENT not in line and "Quartermain" not in line for line in logged)
    assert "Quartermain" not in out + err


@pytest.mark.parametrize(("request_fields", "field", "message"), [
    ({"marks": [{"text": "for {recipent}"}]}, "marks", r"\{recipent\}"),
    ({"marks": [{"text": "{reference}"}]}, "reference", r"\{reference\} is not allowed"),
    ({"recipient": "x" * 121}, "recipient", "at most 120"),
    ({"recipient": "tab\there"}, "recipient", "control"),
    ({"marks": [{"text": "a"}] * 5}, "marks", "at most 4"),
    ({"marks": [{"text": "{recipient}"}]}, "marks", "draws nothing"),
    ({"marks": [{"text": "logo", "image": "nope"}]}, "marks", "not a logo of this class"),
    ({"watermark": {"image": "nope"}}, "watermark", "not a logo of this class"),
    ({"recipient": "\U00013000 Scribe"}, "recipient", "no installed font"),  # a hieroglyph: refused now
])
def test_submit_refuses_bad_marks_and_values_before_storing_anything(  # type: ignore[no-untyped-def]
    store, tmp_path: Path, request_fields: dict[str, Any], field: str, message: str
) -> None:
    service = _service(store, _settings(tmp_path))
    with pytest.raises(InvalidWatermark, match=message) as caught:
        service.submit(Principal("k1", "acme", ("submit",)), io.BytesIO(many_pages(1)),
                       SubmitRequest(document_class="external", **request_fields))
    assert caught.value.field == field
    assert not list(service.router.for_region("local").list(""))
