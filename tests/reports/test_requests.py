"""Templates, report requests and retries against both store dialects: immutable versions, one request and
one job however often it is created, a retry is a second job linked to the failed one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from docfence.blobs import RegionRouter
from docfence.config import DocumentClass, Settings
from docfence.core.clock import FakeClock
from docfence.core.errors import IdempotencyConflict, IllegalTransition, NotFound, TemplateError
from docfence.core.policy import WatermarkSpec
from docfence.core.states import JobState
from docfence.engines.marks import MarkSet
from docfence.reports import ReportRequests, RequestSpec, Templates
from docfence.samples.monthly_report import load_monthly_bundle, sample_monthly_data
from docfence.store.sqlstore import SqlStore


def spec(template: str, **changes: object) -> RequestSpec:
    base = {"tenant": "acme", "subject": "clinic-1", "period": "2026-01", "template": template,
            "data": sample_monthly_data(pages=1)}
    return RequestSpec(**{**base, **changes})  # type: ignore[arg-type]


def test_template_versions_are_immutable_and_hashed(rstore: SqlStore, monthly: str) -> None:
    templates = Templates(rstore)
    bundle = load_monthly_bundle()
    again, created = templates.create_version("monthly", bundle, actor="test")
    assert not created and again.ref == monthly  # identical content: no new version
    changed = type(bundle)(name=bundle.name, html=bundle.html + "<!-- v2 -->", css=bundle.css,
                           assets=bundle.assets, schema=bundle.schema)
    v2, created = templates.create_version("monthly", changed, actor="test")
    assert created and v2.version == 2 and v2.sha256 != again.sha256
    assert [t.version for t in templates.list("monthly")] == [1, 2]
    assert templates.get("monthly", 1).html == bundle.html
    with pytest.raises(Exception, match="immutable"):  # the database itself refuses an edit
        if rstore.dialect == "sqlite":
            rstore._conn().execute("UPDATE templates SET html = 'x'")  # type: ignore[attr-defined]
        else:
            rstore._conn().execute("UPDATE templates SET html = 'x'")  # type: ignore[attr-defined]
    with pytest.raises(TemplateError):
        templates.create_version("monthly", type(bundle)(name="x", html="", css="",
                                                          schema={"type": 12}), actor="test")
    actions = [e.action for e in rstore.audit_trail() if e.chain == "reports"]
    assert actions.count("template_version_created") == 2


def test_creating_a_request_twice_yields_one_request_and_one_job(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    first, created = requests_uc.create(spec(monthly), actor="test")
    second, created_again = requests_uc.create(spec(monthly), actor="test")
    assert created and not created_again
    assert first.request.id == second.request.id
    assert [j.id for j in second.jobs] == [first.jobs[0].id]
    job = first.jobs[0]
    assert job.report_request_id == first.request.id and job.kind == "report"
    assert job.policy.report == {"template": monthly, "processor": "local", "variant": None,
                                 "request_id": first.request.id}
    req = first.request
    assert (req.template_version, req.region, req.processor) == (1, "local", "local")
    assert req.retention_until > req.created_at
    with pytest.raises(IdempotencyConflict):
        requests_uc.create(spec(monthly, data=sample_monthly_data(pages=1, seed=5)), actor="test")
    with pytest.raises(NotFound):
        requests_uc.create(spec("monthly@9", period="2026-02"), actor="test")
    assert requests_uc.get(req.id).state == "queued"
    with pytest.raises(NotFound):
        requests_uc.get(req.id, tenant="other")


def test_retry_creates_a_second_job_linked_to_the_failed_one(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    detail, _ = requests_uc.create(spec(monthly), actor="test")
    with pytest.raises(IllegalTransition):
        requests_uc.retry(detail.request.id, actor="op")  # the job is still queued
    (claim,) = rstore.claim("w1")
    failed = rstore.fail(claim.job.id, claim.attempt, "w1", "lease_expired", "bad", retryable=False)
    assert failed.state is JobState.FAILED
    retry = requests_uc.retry(detail.request.id, actor="op")
    assert retry.parent_job_id == failed.id and retry.report_request_id == detail.request.id
    assert retry.policy.evolve(fields={}) == failed.policy.evolve(fields={})  # only its own fields differ
    assert retry.policy.fields is not None and retry.policy.fields["job_id"] == retry.id
    assert retry.input_sha256 == failed.input_sha256
    with pytest.raises(IllegalTransition):
        requests_uc.retry(detail.request.id, actor="op")  # the newest job is the queued retry
    jobs = requests_uc.get(detail.request.id).jobs
    assert [j.id for j in jobs] == [failed.id, retry.id]
    assert jobs[0].state is JobState.FAILED  # the evidence stays


def test_report_jobs_get_their_field_values_like_watermark_jobs(
    settings: Settings, rstore: SqlStore, router: RegionRouter, monthly: str
) -> None:
    """`{job_id}`, `{date}`, `{tenant}`, `{sha8}` in a class's marks print the job's values, not nothing."""
    fielded = DocumentClass("fielded", watermark=WatermarkSpec(text="ISSUED {job_id} ON {date} ({sha8})"))
    settings = replace(settings, classes={**settings.classes, "fielded": fielded})
    clock = FakeClock(start=datetime(2026, 3, 4, 23, 30, tzinfo=UTC))
    requests_uc = ReportRequests(settings, rstore, router, clock=clock)
    detail, _ = requests_uc.create(spec(monthly, document_class="fielded"), actor="test")
    job = rstore.get(detail.jobs[0].id)
    fields = job.policy.fields or {}
    assert fields["job_id"] == job.id and fields["tenant"] == "acme"
    assert fields["date"] == "2026-03-04" and fields["datetime"] == "2026-03-04 23:30 UTC"
    assert job.input_sha256 is not None and fields["sha8"] == job.input_sha256[:8]
    (drawn,) = MarkSet.of(job.policy).on_page(0, 1)  # the text the renderer draws on the page
    assert drawn.text == f"ISSUED {job.id} ON 2026-03-04 ({job.input_sha256[:8]})"
