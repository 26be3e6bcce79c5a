"""A report's `subject` has one syntax wherever it enters (the API, the CLI, schedules), and a schedule's
data file is always inside its tenant's folder: a subject that would leave it is refused when the schedule
is created, and one stored before that check is reported (result, log line, metric) without the other
tenant's file being opened, while the other schedules of the pass still run. Both dialects, a real
data folder."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from docfence.core.errors import InvalidRequest
from docfence.observability import metrics
from docfence.reports import ReportRequests
from docfence.reports.scheduler import DirectoryDataSource, Scheduler, SchedulerConfig, add_schedule
from docfence.samples.monthly_report import sample_monthly_data
from docfence.store.sqlstore import SqlStore


def _scheduler_errors() -> float:
    return float(metrics.LOOP_ERRORS.labels("scheduler")._value.get())


@pytest.mark.parametrize("subject", ["../acme/patient-7", "..", "a/b"])
def test_add_schedule_refuses_a_subject_that_leaves_its_folder(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests, subject: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        add_schedule(requests_uc, tenant="evil", subject=subject, template=monthly, actor="test")
    assert refused.value.field == "subject"
    assert rstore.list_schedules() == []


def _write(root: Path, tenant: str, subject: str, text: str) -> Path:
    path = root / tenant / subject / "2026-01.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_stored_escaping_subject_is_reported_and_the_others_run(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A schedule written before the subject rule (straight into the store) names another tenant's
    folder. acme's file there is not JSON: opening it would answer template_data_invalid; the subject
    is refused before anything is opened (invalid_request)."""
    template_id, version = monthly.split("@")
    bad, _ = rstore.insert_schedule(
        actor="test", id="sch_evil", tenant="evil", subject="../acme/patient-7", template_id=template_id,
        template_version=int(version), day_of_month=1, catch_up_periods=3, variant=None,
        document_class="default", processor="local", last_period="2025-12")
    _write(tmp_path, "acme", "patient-7", "{not json")
    _write(tmp_path, "beta", "clinic-1", json.dumps({**sample_monthly_data(pages=1)}))
    good, _ = add_schedule(requests_uc, tenant="beta", subject="clinic-1", template=monthly,
                           start_period="2026-01", actor="test")
    before = _scheduler_errors()
    with caplog.at_level(logging.WARNING, logger="docfence.reports.scheduler"):
        result = Scheduler(SchedulerConfig(DirectoryDataSource(tmp_path)), requests_uc).run_once(
            datetime(2026, 2, 1, 6, tzinfo=UTC))
    assert result.errors == [(bad.id, "invalid_request")]
    assert _scheduler_errors() - before == 1.0
    assert f"schedule {bad.id} failed: invalid_request" in caplog.text
    assert [r.subject for r in rstore.list_report_requests("beta")] == ["clinic-1"]
    assert rstore.list_report_requests("evil") == [] and rstore.list_report_requests("acme") == []
    assert good.id not in {sid for sid, _ in result.errors}


def test_a_data_file_that_is_not_json_is_reported_and_the_others_run(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests, tmp_path: Path
) -> None:
    _write(tmp_path, "alpha", "clinic-1", "\xff not json")
    _write(tmp_path, "beta", "clinic-1", json.dumps(sample_monthly_data(pages=1)))
    broken, _ = add_schedule(requests_uc, tenant="alpha", subject="clinic-1", template=monthly,
                             start_period="2026-01", actor="test")
    add_schedule(requests_uc, tenant="beta", subject="clinic-1", template=monthly, start_period="2026-01",
                 actor="test")
    result = Scheduler(SchedulerConfig(DirectoryDataSource(tmp_path)), requests_uc).run_once(
        datetime(2026, 2, 1, 6, tzinfo=UTC))
    assert result.errors == [(broken.id, "template_data_invalid")]
    assert len(result.created) == 1
    assert [r.period for r in rstore.list_report_requests("beta")] == ["2026-01"]


def test_a_link_out_of_the_tenant_folder_is_refused(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests, tmp_path: Path
) -> None:
    """Paths are built from checked segments, then resolved: a subject folder that links into another
    tenant's is refused too."""
    target = _write(tmp_path, "acme", "patient-7", json.dumps(sample_monthly_data(pages=1))).parent
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "clinic-1").symlink_to(target)
    schedule, _ = add_schedule(requests_uc, tenant="evil", subject="clinic-1", template=monthly,
                               start_period="2026-01", actor="test")
    with pytest.raises(InvalidRequest):
        DirectoryDataSource(tmp_path).data_for(schedule, "2026-01")
