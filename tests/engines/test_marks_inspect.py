"""`docfence inspect` and the console's job view show a job's marks and field values, the recipient only
when the viewer may see it (both stores)."""

from __future__ import annotations

from docfence.core.policy import JobPolicy, WatermarkSpec
from docfence.core.records import NewJob
from docfence.observability.inspect import format_inspection, inspect_job, inspection_dict

FOOTER = WatermarkSpec.from_mapping({"text": "{recipient} · {page}/{pages}", "position": "footer"})
FIELDS = {"recipient": "Ada Example", "date": "2026-12-01", "job_id": "j1", "sha8": "0123abcd"}


def test_inspect_shows_marks_and_fields_and_hides_the_recipient_by_default(store) -> None:  # type: ignore[no-untyped-def]
    policy = JobPolicy(watermark=WatermarkSpec(), marks=(FOOTER,), fields=dict(FIELDS))
    job, _ = store.submit(NewJob(tenant="acme", policy=policy))
    ins = inspect_job(store, job.id)
    text = format_inspection(ins)
    assert "marks      1. text (hidden) diagonal, pages all, overlay, opacity 0.25" in text
    assert "2. text (hidden) (fields recipient, page, pages) footer, pages all" in text
    assert "recipient (hidden)" in text and "Ada Example" not in text and "CONFIDENTIAL" not in text
    shown_text = format_inspection(ins, recipient_visible=True)
    assert "recipient Ada Example" in shown_text
    assert '2. "{recipient} · {page}/{pages}" footer, pages all' in shown_text
    hidden = inspection_dict(ins)
    assert hidden["fields"]["recipient"] == "(hidden)" and hidden["fields"]["date"] == "2026-12-01"
    assert hidden["timeline"][0]["details"]["recipient"] == "(hidden)"
    assert [(m["kind"], m["text"]) for m in hidden["marks"]] == [("text", None), ("text", None)]
    shown = inspection_dict(ins, recipient_visible=True)
    assert shown["timeline"][0]["details"]["recipient"] == "Ada Example"


def test_a_job_from_before_marks_inspects_with_its_one_mark(store) -> None:  # type: ignore[no-untyped-def]
    job, _ = store.submit(NewJob(tenant="acme", policy=JobPolicy()))
    view = inspection_dict(inspect_job(store, job.id), recipient_visible=True)
    assert view["fields"] == {} and view["marks"][0]["text"] == "CONFIDENTIAL"
    assert view["marks"][0]["fields"] == []
