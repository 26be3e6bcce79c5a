"""Report corrections on both store dialects: data checked against the template's schema and periods
checked when requested; a request superseded by corrected data, linked both ways, audited, with the
failed attempt kept as evidence; watermarks chosen per request."""

from __future__ import annotations

import pytest

from docfence.core.errors import (
    IdempotencyConflict,
    IllegalTransition,
    InvalidReportData,
    InvalidRequest,
    InvalidWatermark,
)
from docfence.core.states import JobState
from docfence.reports import ReportRequests, RequestSpec
from docfence.reports.requests import check_period
from docfence.samples.monthly_report import sample_monthly_data
from docfence.store.sqlstore import SqlStore


def spec(template: str, **changes: object) -> RequestSpec:
    base = {"tenant": "acme", "subject": "clinic-1", "period": "2026-01", "template": template,
            "data": sample_monthly_data(pages=1)}
    return RequestSpec(**{**base, **changes})  # type: ignore[arg-type]


def _fail_newest(rstore: SqlStore) -> None:
    (claim,) = rstore.claim("w1")
    rstore.fail(claim.job.id, claim.attempt, "w1", "template_data_invalid", "bad data", retryable=False)


@pytest.mark.parametrize("period", ["2026-11", "2026", "2026-Q4", "2026-H2", "2026-W53", "2024-02-29"])
def test_period_keys_that_are_accepted(period: str) -> None:
    assert check_period(period) == period


@pytest.mark.parametrize("period", ["october", "2026-13", "2026-00", "2025-02-29", "2025-W53", "26-11", "",
                                    "2026-Q5", "2026-11 "])
def test_period_keys_that_are_refused(period: str) -> None:
    with pytest.raises(InvalidRequest, match=r"^period=.*: must be YYYY-MM \(e\.g\. 2026-11\)") as refused:
        check_period(period)
    assert refused.value.field == "period"


def test_bad_data_is_refused_when_requested_naming_the_path(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    data = sample_monthly_data(pages=1)
    data["clinic"] = ""
    with pytest.raises(InvalidReportData) as refused:
        requests_uc.create(spec(monthly, data=data), actor="test")
    assert refused.value.field == "data" and refused.value.code == "invalid_report_data"
    assert "$.clinic: violates 'minLength' 1" in refused.value.message
    assert rstore.list_report_requests("acme") == [] and rstore.list_jobs() == []


def test_a_failed_request_is_superseded_by_corrected_data(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    first, _ = requests_uc.create(spec(monthly), actor="test")
    _fail_newest(rstore)
    corrected = spec(monthly, data=sample_monthly_data(pages=1, seed=7))
    with pytest.raises(IdempotencyConflict, match="--supersede"):
        requests_uc.create(corrected, actor="test")  # without asking for a correction: refused
    second, created = requests_uc.create(RequestSpec(**{**corrected.__dict__, "supersede": True}),
                                         actor="clerk")
    assert created and second.request.id != first.request.id
    assert (second.request.revision, second.request.supersedes) == (2, first.request.id)
    old = requests_uc.get(first.request.id)
    assert old.request.superseded_by == second.request.id and old.request.superseded_at is not None
    assert old.jobs[0].state is JobState.FAILED  # the failed attempt stays as evidence
    new_job = second.jobs[0]
    assert new_job.parent_job_id == old.jobs[0].id and new_job.state is JobState.QUEUED
    assert new_job.report_request_id == second.request.id
    # asking again (a lost response): the same correction, nothing new
    again, created_again = requests_uc.create(RequestSpec(**{**corrected.__dict__, "supersede": True}),
                                              actor="clerk")
    assert not created_again and again.request.id == second.request.id
    # the period's current request is the correction: a plain request with its data returns it
    plain, _ = requests_uc.create(corrected, actor="test")
    assert plain.request.id == second.request.id
    events = [e for e in rstore.audit_trail() if e.action == "report_request_superseded"]
    assert len(events) == 1 and events[0].actor == "clerk"
    assert events[0].details["supersedes"] == first.request.id
    assert events[0].details["request_id"] == second.request.id and events[0].reason == "corrected"


def test_a_request_with_an_active_job_is_not_superseded(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    requests_uc.create(spec(monthly), actor="test")
    corrected = spec(monthly, data=sample_monthly_data(pages=1, seed=3), supersede=True)
    with pytest.raises(IllegalTransition, match="still queued; cancel it"):
        requests_uc.create(corrected, actor="test")
    assert len(rstore.list_report_requests("acme")) == 1


def test_the_watermark_comes_from_the_class_or_the_request(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    from_class, _ = requests_uc.create(spec(monthly), actor="test")
    assert from_class.jobs[0].policy.watermark.text == "SYNTHETIC REPORT"  # type: ignore[union-attr]
    chosen = {"text": "DRAFT", "position": "footer", "font_size": 9}
    own, _ = requests_uc.create(spec(monthly, subject="clinic-2", watermark=chosen), actor="test")
    mark = own.jobs[0].policy.watermark
    assert mark is not None and (mark.text, mark.position, mark.font_size) == ("DRAFT", "footer", 9)
    assert own.request.watermark == chosen
    with pytest.raises(IdempotencyConflict):  # the same request with another mark is another request
        requests_uc.create(spec(monthly, subject="clinic-2", watermark={"text": "FINAL"}), actor="test")
    with pytest.raises(InvalidWatermark, match="unknown watermark field 'txt'") as bad:
        requests_uc.create(spec(monthly, subject="clinic-3", watermark={"txt": "x"}), actor="test")
    assert bad.value.field == "watermark"


def test_retrying_a_job_that_failed_on_its_data_points_at_supersede(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    detail, _ = requests_uc.create(spec(monthly), actor="test")
    _fail_newest(rstore)  # failed with template_data_invalid
    with pytest.raises(IllegalTransition, match="--supersede"):
        requests_uc.retry(detail.request.id, actor="op")
