"""The scheduler against both dialects: each period's request exactly once (two passes, one request, one
job), catch-up within the window after downtime, older periods skipped with an audit event."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from docfence.core.records import Schedule
from docfence.reports import ReportRequests
from docfence.reports.scheduler import (
    Scheduler,
    SchedulerConfig,
    add_schedule,
    latest_due_period,
    period_at,
)
from docfence.samples.monthly_report import sample_monthly_data
from docfence.store.sqlstore import SqlStore


@dataclass
class MemoryData:
    missing: set[str] = field(default_factory=set)

    def data_for(self, schedule: Schedule, period: str) -> dict[str, Any] | None:
        if period in self.missing:
            return None
        return {**sample_monthly_data(pages=1), "period": period}


def at(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, 6, tzinfo=UTC)


def test_due_period_arithmetic() -> None:
    assert period_at(latest_due_period(1, at(2026, 2, 1))) == "2026-01"
    assert period_at(latest_due_period(5, at(2026, 2, 4))) == "2025-12"
    assert period_at(latest_due_period(1, at(2026, 1, 1))) == "2025-12"


def test_each_period_once_and_catch_up_within_the_window(
    rstore: SqlStore, monthly: str, requests_uc: ReportRequests
) -> None:
    data = MemoryData()
    scheduler = Scheduler(SchedulerConfig(data_source=data), requests_uc)
    schedule, created = add_schedule(requests_uc, tenant="acme", subject="clinic-1", template=monthly,
                                     day_of_month=1, catch_up_periods=2, actor="test")  # clock: 2026-01-01
    assert created and schedule.last_period == "2025-12"
    again = add_schedule(requests_uc, tenant="acme", subject="clinic-1", template=monthly, actor="t")
    assert again == (schedule, False)
    assert scheduler.run_once(at(2026, 1, 20)).created == []  # 2026-01 is due on Feb 1
    first = scheduler.run_once(at(2026, 2, 1))
    second = scheduler.run_once(at(2026, 2, 1))
    assert len(first.created) == 1 and second.created == [] and second.existing == []
    requests = rstore.list_report_requests("acme")
    assert [r.period for r in requests] == ["2026-01"]
    assert len(rstore.request_jobs(requests[0].id)) == 1
    # downtime until mid-June: 02 is outside the 2-period window, 03..05 are caught up
    data.missing = {"2026-05"}
    late = scheduler.run_once(at(2026, 6, 15))
    assert late.skipped == [(schedule.id, "2026-02")]
    assert late.waiting == [(schedule.id, "2026-05")]
    assert len(late.created) == 2
    data.missing = set()
    assert len(scheduler.run_once(at(2026, 6, 16)).created) == 1
    again = scheduler.run_once(at(2026, 6, 16))
    assert again.created == [] and again.skipped == []
    periods = sorted(r.period for r in rstore.list_report_requests("acme"))
    assert periods == ["2026-01", "2026-03", "2026-04", "2026-05"]
    assert all(len(rstore.request_jobs(r.id)) == 1 for r in rstore.list_report_requests("acme"))
    assert rstore.get_schedule(schedule.id).last_period == "2026-05"
    actions = [e.action for e in rstore.audit_trail() if e.chain == "reports"]
    assert actions.count("schedule_run") == 4 and actions.count("schedule_periods_skipped") == 1
    assert actions.count("report_request_created") == 4
