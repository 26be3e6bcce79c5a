"""A retry is refused when the failure would repeat: a report whose newest job failed with a document
error that is not retryable (template_error, validation_failed, ...) answers `retry_would_fail`, saying
why and what to do instead, through the use case (both stores), the API (409) and `docfence reports
retry` (one line, exit 2), and no job is created. Failures a new try may not repeat still retry, and
an operator retries any tenant's report with a required reason, audited as its key."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from docfence.core.errors import IllegalTransition, RetryWouldFail
from docfence.core.records import Job
from docfence.core.states import JobState
from docfence.engines.report.bundle import TemplateBundle
from docfence.reports import ReportRequests, RequestSpec, Templates
from docfence.reports.requests import deterministic_failure
from docfence.samples.monthly_report import MONTHLY_DIR, sample_monthly_data
from docfence.service import Service
from docfence.store.base import Store, open_store
from docfence.store.sqlstore import SqlStore

from .test_cli import env, run  # noqa: F401  (the CLI's environment fixture and runner)

UNDEFINED = "template used an undefined name 'clinic_nmae' (line 3)"


def _spec(template: str, subject: str = "clinic-1", tenant: str = "acme") -> RequestSpec:
    return RequestSpec(tenant=tenant, subject=subject, period="2026-01", template=template,
                       data=sample_monthly_data(pages=1))


def _fail_newest(store: Store, code: str, message: str = UNDEFINED) -> Job:
    (claim,) = store.claim("w1")
    failed = store.fail(claim.job.id, claim.attempt, "w1", code, message, retryable=False)
    assert failed.state is JobState.FAILED
    return failed


def test_the_document_errors_that_repeat_are_the_non_retryable_ones() -> None:
    for code in ("template_error", "template_data_invalid", "validation_failed", "engine_error",
                 "signing_refused", "over_limits"):
        assert deterministic_failure(code) is not None, code
    for other in ("render_crashed", "render_resource_exceeded", "lease_expired", "deadline_exceeded",
                  "internal_error", "provider_failed", "storage_error", "render_failed", None):
        assert deterministic_failure(other) is None, other


def test_a_template_error_is_not_retried_and_says_why(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    detail, _ = requests_uc.create(_spec(monthly), actor="test")
    failed = _fail_newest(rstore, "template_error")
    with pytest.raises(RetryWouldFail) as refused:
        requests_uc.retry(detail.request.id, actor="op", reason="try again")
    assert refused.value.code == "retry_would_fail" and isinstance(refused.value, IllegalTransition)
    message = refused.value.message
    assert failed.id in message and "template_error" in message and "clinic_nmae" in message
    assert "would fail the same way" in message and "templates create" in message
    assert [j.id for j in rstore.request_jobs(detail.request.id)] == [failed.id]  # no new job


@pytest.mark.parametrize("code", ["lease_expired", "render_crashed", "provider_failed", "internal_error"])
def test_a_failure_another_try_may_not_repeat_is_retried_with_its_reason(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests, code: str
) -> None:
    detail, _ = requests_uc.create(_spec(monthly), actor="test")
    failed = _fail_newest(rstore, code, "attempts exhausted")
    retry = requests_uc.retry(detail.request.id, actor="key:op1", reason="  worker fleet is back  ")
    assert retry.parent_job_id == failed.id and retry.state is JobState.QUEUED
    events = [(e.action, e.actor, e.details.get("note"), e.details.get("retry_of"))
              for e in rstore.audit_events(retry.id)]
    assert events == [("submitted", "key:op1", None, None),
                      ("retry_requested", "key:op1", "worker fleet is back", failed.id)]


def test_a_canceled_report_is_retried(rstore: SqlStore, monthly: str, requests_uc: ReportRequests) -> None:
    detail, _ = requests_uc.create(_spec(monthly), actor="test")
    rstore.cancel(detail.jobs[0].id, actor="test")
    assert requests_uc.retry(detail.request.id, actor="op").parent_job_id == detail.jobs[0].id


# -- the API -------------------------------------------------------------------------------------------------


def _failed_request(service: Service, subject: str, code: str) -> tuple[str, str]:
    """(request id, failed job id): a report of tenant acme whose job failed with `code`."""
    bundle = TemplateBundle(name="t", html="<p>x</p>", css="", assets={}, schema={"type": "object"})
    Templates(service.store).create_version("acme-t", bundle, actor="test", owner="acme")
    requests = ReportRequests(service.settings, service.store, service.router)
    spec = RequestSpec(tenant="acme", subject=subject, period="2026-01", template="acme-t@1")
    request_id = requests.create(spec, actor="test")[0].request.id
    return request_id, _fail_newest(service.store, code).id


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_the_api_answers_409_retry_would_fail(api: tuple[httpx.Client, Service]) -> None:
    client, service = api
    user = _auth(service.create_api_key("acme", ("submit", "read"))[1])
    request_id, _ = _failed_request(service, "clinic-1", "template_error")
    refused = client.post(f"/v1/report-requests/{request_id}/retry", headers=user)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "retry_would_fail" and "clinic_nmae" in error["message"]
    assert len(service.store.request_jobs(request_id)) == 1
    other, _ = _failed_request(service, "clinic-2", "lease_expired")
    retried = client.post(f"/v1/report-requests/{other}/retry", headers=user)
    assert retried.status_code == 201 and retried.json()["state"] == "queued"


def test_an_operator_retries_another_tenants_report_with_a_reason(api: tuple[httpx.Client, Service]) -> None:
    client, service = api
    record, key = service.create_api_key("operators", ("operator",))
    template, _ = _failed_request(service, "clinic-0", "template_error")  # one queued job at a time
    refused = client.post(f"/v1/report-requests/{template}/retry", headers=_auth(key),
                          params={"reason": "try again"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "retry_would_fail"
    request_id, failed = _failed_request(service, "clinic-1", "lease_expired")
    path = f"/v1/report-requests/{request_id}/retry"
    other = _auth(service.create_api_key("other", ("submit",))[1])
    assert client.post(path, headers=other, params={"reason": "x"}).status_code == 404  # still another's
    no_reason = client.post(path, headers=_auth(key))
    assert no_reason.status_code == 422 and no_reason.json()["error"]["field"] == "reason"
    assert len(service.store.request_jobs(request_id)) == 1
    retried = client.post(path, headers=_auth(key), params={"reason": "workers are back"})
    assert retried.status_code == 201, retried.text
    job = service.store.get(retried.json()["id"])
    assert (job.tenant, job.parent_job_id) == ("acme", failed)
    events = [(e.action, e.actor, e.details.get("note")) for e in service.store.audit_events(job.id)]
    assert events == [("submitted", f"key:{record.id}", None),
                      ("retry_requested", f"key:{record.id}", "workers are back")]


# -- the CLI -------------------------------------------------------------------------------------------------
def test_the_cli_prints_the_refusal_and_exits_2(env: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    data = env / "data.json"
    data.write_text(json.dumps(sample_monthly_data(pages=1)))
    assert run("templates", "create", "--id", "monthly", "--dir", str(MONTHLY_DIR)) == 0
    assert run("reports", "request", "--tenant", "acme", "--subject", "clinic-1", "--period", "2026-01",
               "--template", "monthly@1", "--data", str(data)) == 0
    request_id = capsys.readouterr().out.splitlines()[-1].split("\t")[0]
    store = open_store(f"sqlite:///{env}/docfence.db")
    try:
        failed = _fail_newest(store, "template_error")
        assert run("reports", "retry", request_id, "--reason", "once more") == 2
        err = capsys.readouterr().err
        assert err.startswith("docfence: retry_would_fail: ") and failed.id in err and "clinic_nmae" in err
        assert len(err.strip().splitlines()) == 1
        assert [j.id for j in store.request_jobs(request_id)] == [failed.id]
    finally:
        store.close()
