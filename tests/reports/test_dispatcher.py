"""The rollout matrix of provider behaviours (success, failure, malformed answers, 429s, 5xx, stuck,
unknown status) through the dispatcher, against the loopback fake provider: every path ends in a
terminal job with the provider's last status and time recorded and an audit event; none stays running.
SQLite for the matrix, PostgreSQL for success and stuck-past-deadline."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from docfence.blobs import RegionRouter
from docfence.blobs.kek.jobs import JobKeys, RowKey, read_object
from docfence.config import Settings
from docfence.core.clock import FakeClock
from docfence.core.errors import InvalidReportData
from docfence.core.states import JobState
from docfence.engines.report.render import render_report
from docfence.providers import PollPolicy, docfence_preset
from docfence.reports import ReportRequests, RequestSpec
from docfence.reports.dispatcher import Dispatcher, DispatcherConfig
from docfence.samples.monthly_report import load_monthly_bundle, sample_monthly_data
from docfence.sandbox import Sandbox
from docfence.store.sqlstore import SqlStore
from docfence.testing.fake_provider import FakeProvider

FAST = PollPolicy(initial_delay_s=1.0, max_delay_s=8.0, backoff_factor=2.0, jitter_ratio=0.0,
                  retry_after_cap_s=20.0, max_consecutive_5xx=3, max_consecutive_malformed=1)
Q, R, OK = ("status", "queued"), ("status", "rendering"), ("status", "succeeded")
E503 = ("http", 503)


@pytest.fixture(scope="module")
def provider_pdf() -> bytes:
    return render_report(load_monthly_bundle(), sample_monthly_data(pages=1)).pdf


@pytest.fixture
def fake(provider_pdf: bytes) -> Iterator[FakeProvider]:
    with FakeProvider(artifact=provider_pdf) as provider:
        yield provider


@pytest.fixture
def dispatcher(fake: FakeProvider, rstore: SqlStore, router: RegionRouter, clock: FakeClock,
               sandbox: Sandbox, settings: Settings) -> Dispatcher:
    config = DispatcherConfig(providers={"vendor": docfence_preset(fake.base_url, fake.api_key, poll=FAST)},
                              worker_id="dispatcher-1", heartbeat_interval_s=5.0, commit_margin_s=10.0)
    keys = JobKeys(settings.encryption, settings.data_folder())  # the request use cases' (conftest)
    return Dispatcher(config, rstore, router, clock=clock, sleep=clock.advance, sandbox=sandbox,
                      job_keys=keys)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox() as shared:  # one zygote for the module: each check still gets its own process
        yield shared


def provider_request(requests_uc: ReportRequests, template: str, **changes: Any) -> str:
    spec = RequestSpec(tenant="acme", subject="clinic-1", period="2026-01", template=template,
                       data=sample_monthly_data(pages=1), processor="vendor")
    detail, _ = requests_uc.create(RequestSpec(**{**spec.__dict__, **changes}), actor="test")
    return detail.jobs[0].id


MATRIX = [
    ("success", [Q, R, OK], "succeeded", None, "succeeded"),
    ("provider_failure", [Q, ("status", "failed", "template_error")], "failed", "provider_failed", "failed"),
    ("malformed", [Q, ("raw", b"<html>proxy</html>")], "failed", "provider_malformed", "queued"),
    ("repeated_429_then_ok", [*[("http", 429, {"Retry-After": "3"})] * 4, OK], "succeeded", None,
     "succeeded"),
    ("429_forever", [("http", 429, {"Retry-After": "7"})], "failed", "provider_deadline", None),
    ("stuck_in_progress", [R], "failed", "provider_deadline", "rendering"),
    ("unknown_status", [Q, ("status", "paused")], "failed", "provider_unknown_status", "paused"),
    ("flapping_5xx", [E503, Q, ("http", 502), R, ("http", 500), OK], "succeeded", None, "succeeded"),
]


@pytest.mark.parametrize("store_kind", ["sqlite"])
@pytest.mark.parametrize(("name", "script", "state", "code", "last_status"), MATRIX,
                         ids=[m[0] for m in MATRIX])
def test_rollout_matrix(
    name: str, script: list[Any], state: str, code: str | None, last_status: str | None,
    fake: FakeProvider, dispatcher: Dispatcher, rstore: SqlStore, router: RegionRouter, monthly: str,
    requests_uc: ReportRequests, provider_pdf: bytes,
) -> None:
    fake.next_scripts.append(script)
    job_id = provider_request(requests_uc, monthly)
    result = dispatcher.run_once()
    assert result.claimed == 1
    assert_terminal(rstore, job_id, state, code, last_status)
    if state == "succeeded":
        assert_artifact(rstore, router, job_id, provider_pdf, dispatcher.keys)


def assert_terminal(
    store: SqlStore, job_id: str, state: str, code: str | None, last_status: str | None
) -> None:
    job = store.get(job_id)
    assert job.state.value == state and job.terminal
    assert job.last_error_code == code
    obs = store.provider_observation(job_id)
    assert obs is not None and obs.attempt == job.attempt and obs.passes >= 1
    assert obs.status == last_status and obs.observed_at is not None
    assert obs.outcome == (code or "succeeded")
    actions = [e.action for e in store.audit_events(job_id)]
    assert "provider_outcome" in actions
    assert actions[-1] == ("artifact_committed" if state == "succeeded" else "permanent_error")
    assert job.deadline_at > obs.observed_at  # polling stopped before the deadline, with a verdict


def assert_artifact(store: SqlStore, router: RegionRouter, job_id: str, provider_pdf: bytes,
                    keys: JobKeys) -> None:
    artifact = store.artifact(job_id)
    key = keys.key_for(RowKey.of(store.get(job_id)))
    assert artifact is not None and key is not None  # sealed under the job's data key
    data = read_object(router.for_region("local"), artifact.key, key, expected_sha256=artifact.sha256)
    assert hashlib.sha256(data).hexdigest() == artifact.sha256
    assert artifact.pages == 1 and artifact.validation["ok"] is True  # watermarked and validated
    assert artifact.validation["provider"]["download_sha256"] == hashlib.sha256(provider_pdf).hexdigest()
    assert data != provider_pdf  # the class's watermark was applied


@pytest.mark.parametrize("store_kind", ["sqlite"])
def test_5xx_forever_retries_within_attempts_without_duplicate_provider_jobs(
    fake: FakeProvider, dispatcher: Dispatcher, rstore: SqlStore, monthly: str,
    requests_uc: ReportRequests, clock: FakeClock,
) -> None:
    fake.next_scripts.append([E503])
    job_id = provider_request(requests_uc, monthly)
    for _ in range(10):
        if rstore.get(job_id).terminal:
            break
        dispatcher.run_once()
        clock.advance(30)  # past the retry backoff
    job = rstore.get(job_id)
    assert job.state is JobState.FAILED and job.last_error_code == "provider_unavailable"
    assert job.attempt == job.max_attempts == 3
    assert fake.creations == 1  # the idempotency key is the job id: three submits, one provider job
    keys = {r.headers["idempotency-key"] for r in fake.requests_to("api", "/v1/jobs", method="POST")}
    assert keys == {f"docfence-{job_id}"}
    obs = rstore.provider_observation(job_id)
    assert obs is not None and obs.http_status == 503 and obs.attempt == 3


@pytest.mark.parametrize("store_kind", ["sqlite"])
def test_bad_data_fails_before_anything_is_sent(
    fake: FakeProvider, dispatcher: Dispatcher, rstore: SqlStore, monthly: str, requests_uc: ReportRequests,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(InvalidReportData):  # refused when requested...
        provider_request(requests_uc, monthly, data={"clinic": ""})
    # ...and a job queued before that check existed (an upgrade) still fails before anything is sent
    monkeypatch.setattr("docfence.reports.requests._check_data", lambda template, data: None)
    job_id = provider_request(requests_uc, monthly, data={"clinic": ""})
    dispatcher.run_once()
    job = rstore.get(job_id)
    assert job.state is JobState.FAILED and job.last_error_code == "template_data_invalid"
    assert fake.requests == []
    obs = rstore.provider_observation(job_id)
    assert obs is not None and obs.kind == "input_failed" and obs.outcome == "template_data_invalid"


@pytest.mark.parametrize("store_kind", ["postgres"])
@pytest.mark.parametrize(("name", "script", "state", "code", "last_status"),
                         [MATRIX[0], MATRIX[5]], ids=["success", "stuck_in_progress"])
def test_postgres_cases(
    name: str, script: list[Any], state: str, code: str | None, last_status: str | None,
    fake: FakeProvider, dispatcher: Dispatcher, rstore: SqlStore, router: RegionRouter, monthly: str,
    requests_uc: ReportRequests, provider_pdf: bytes,
) -> None:
    fake.next_scripts.append(script)
    job_id = provider_request(requests_uc, monthly)
    assert dispatcher.run_once().claimed == 1
    assert_terminal(rstore, job_id, state, code, last_status)
    if state == "succeeded":
        assert_artifact(rstore, router, job_id, provider_pdf, dispatcher.keys)
