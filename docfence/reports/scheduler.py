"""The monthly scheduler: `Scheduler(config, requests).run_once(now)` creates each due period's report
request exactly once (unique request + idempotent create) and catches up missed periods within the
schedule's window; older missed periods are skipped with an audit event, never silently."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from docfence.core import loops
from docfence.core.access import check_tenant
from docfence.core.clock import SystemClock
from docfence.core.errors import ConfigError, DocfenceError, InvalidRequest, TemplateDataInvalid
from docfence.core.ids import new_id
from docfence.core.records import Schedule
from docfence.engines.report.render import VARIANTS
from docfence.observability import metrics
from docfence.reports.requests import (
    LOCAL_PROCESSOR,
    ReportRequests,
    RequestSpec,
    check_subject,
    parse_template_ref,
)

log = logging.getLogger(__name__)

MAX_CATCH_UP_PERIODS = 24
_MONTH_RE = re.compile(r"([0-9]{4})-(0[1-9]|1[0-2])")


def period_index(period: str) -> int:
    match = _MONTH_RE.fullmatch(period)
    if match is None:
        raise InvalidRequest("a monthly period is written YYYY-MM")
    return int(match.group(1)) * 12 + int(match.group(2)) - 1


def period_at(index: int) -> str:
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


def latest_due_period(day_of_month: int, now: datetime) -> int:
    """The newest period whose run day has come: on day D of month M the period M-1 is due."""
    current = now.year * 12 + now.month - 1
    return current - 1 if now.day >= day_of_month else current - 2


class DataSource(Protocol):
    """Where scheduled reports get their data; None while a period's data is not available yet."""

    def data_for(self, schedule: Schedule, period: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class DirectoryDataSource:
    """Reads `<root>/<tenant>/<subject>/<period>.json`: None while the file does not exist; a file that
    is not UTF-8 JSON holding an object raises TemplateDataInvalid (that schedule waits, reported, until
    the file is fixed); an unreadable one raises its OSError. A tenant, subject or period that is not
    its one path segment, or a path that resolves (through a link) outside the tenant's folder, raises
    InvalidRequest before anything is opened."""

    root: Path

    def data_for(self, schedule: Schedule, period: str) -> dict[str, Any] | None:
        path = self.path_of(schedule, period)
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text("utf-8"))
        except ValueError:  # not UTF-8, or not JSON
            raise TemplateDataInvalid(f"the data file for period {period} is not valid JSON") from None
        if not isinstance(data, dict):
            raise TemplateDataInvalid(f"the data file for period {period} must hold a JSON object")
        return data

    def path_of(self, schedule: Schedule, period: str) -> Path:
        """The data file of `schedule` for `period`, proved to lie inside its tenant's folder."""
        tenant_dir = Path(self.root) / check_tenant(schedule.tenant)
        path = tenant_dir / check_subject(schedule.subject) / f"{period_at(period_index(period))}.json"
        if not path.resolve().is_relative_to(tenant_dir.resolve()):
            raise InvalidRequest(f"schedule {schedule.id}'s data file lies outside its tenant's folder")
        return path


@dataclass(frozen=True)
class SchedulerConfig:
    data_source: DataSource
    actor: str = "scheduler"
    max_catch_up_periods: int = MAX_CATCH_UP_PERIODS  # a cap over every schedule's own window

    def __post_init__(self) -> None:
        if not 0 <= self.max_catch_up_periods <= 120:
            raise ConfigError("max_catch_up_periods must be 0-120")


@dataclass
class SchedulerResult:
    created: list[str] = field(default_factory=list)  # request ids created by this pass
    existing: list[str] = field(default_factory=list)  # due requests that already existed
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (schedule id, period) outside the window
    waiting: list[tuple[str, str]] = field(default_factory=list)  # (schedule id, period) without data yet
    errors: list[tuple[str, str]] = field(default_factory=list)  # (schedule id, error code)


def add_schedule(
    requests: ReportRequests, *, tenant: str, subject: str, template: str, day_of_month: int = 1,
    catch_up_periods: int = 3, variant: str | None = None, document_class: str | None = None,
    processor: str = LOCAL_PROCESSOR, start_period: str | None = None, actor: str,
) -> tuple[Schedule, bool]:
    """Create a schedule (or return the one of the same tenant, subject and template@version). Its first
    request is for `start_period`, by default the next period to come due (no back-fill unless asked)."""
    check_tenant(tenant)
    check_subject(subject)
    template_id, version = parse_template_ref(template)
    if not 1 <= day_of_month <= 28 or not 0 <= catch_up_periods <= MAX_CATCH_UP_PERIODS:
        raise InvalidRequest(f"day_of_month must be 1-28 and catch_up_periods 0-{MAX_CATCH_UP_PERIODS}")
    if processor not in requests.processors:
        raise InvalidRequest(f"processor must be one of {sorted(requests.processors)}")
    if variant not in VARIANTS:
        raise InvalidRequest(f"variant must be one of {sorted(v for v in VARIANTS if v)} or null")
    store = requests.store
    store.get_template(template_id, version, visible_to=tenant)  # NotFound: unknown or another tenant's
    try:
        policy = requests.settings.policy_for(document_class)
    except ConfigError as exc:
        raise InvalidRequest(str(exc)) from exc
    first = period_index(start_period) if start_period else latest_due_period(day_of_month, store.now()) + 1
    return store.insert_schedule(
        actor=actor, id=new_id("sch"), tenant=tenant, subject=subject, template_id=template_id,
        template_version=version, day_of_month=day_of_month, catch_up_periods=catch_up_periods,
        variant=variant, document_class=policy.document_class, processor=processor,
        last_period=period_at(first - 1),
    )


class Scheduler:
    def __init__(self, config: SchedulerConfig, requests: ReportRequests) -> None:
        self.config, self.requests, self.store = config, requests, requests.store

    def run_once(self, now: datetime) -> SchedulerResult:
        """One pass over every schedule. Safe to run twice or on many machines at once. A schedule that
        fails (a bad subject, a data file that is not JSON, a store error) is reported: its id and error
        code in `result.errors`, a log line and the `scheduler` loop-error metric; the others run."""
        result = SchedulerResult()
        for schedule in self.store.list_schedules():
            try:
                self._run_schedule(schedule, now, result)
            except Exception as exc:  # one broken schedule (or data file) must not stop the others
                result.errors.append((schedule.id, exc.code if isinstance(exc, DocfenceError)
                                      else "internal_error"))
                loops.report_failure(f"schedule {schedule.id}", exc, log)
                metrics.record_loop_error("scheduler")
        return result

    def run_forever(self, stop: threading.Event, *, interval_s: float = 3600.0,
                    now: Callable[[], datetime] | None = None,
                    on_pass: Callable[[SchedulerResult], None] | None = None) -> None:
        """A pass at `now()` (default: the system clock) every `interval_s` until `stop`, each result
        handed to `on_pass`, under the one loop supervisor (core.loops): a pass that raises (the store
        is down) is logged and counted as `scheduler`, and the next pass follows."""
        at = now or SystemClock().now

        def one_pass() -> None:
            result = self.run_once(at())
            if on_pass is not None:
                on_pass(result)

        loops.run_forever("scheduler", one_pass, interval_s=interval_s, stop=stop,
                          record_error=metrics.record_loop_error, logger=log)

    def _run_schedule(self, schedule: Schedule, now: datetime, result: SchedulerResult) -> None:
        due = latest_due_period(schedule.day_of_month, now)
        window = min(schedule.catch_up_periods, self.config.max_catch_up_periods)
        start = period_index(schedule.last_period) + 1 if schedule.last_period else due - window
        oldest_allowed = due - window
        if start < oldest_allowed:
            skipped = [period_at(i) for i in range(start, oldest_allowed)]
            self.store.advance_schedule(schedule.id, skipped[-1], actor=self.config.actor, skipped=skipped)
            result.skipped.extend((schedule.id, p) for p in skipped)
            start = oldest_allowed
        for index in range(start, due + 1):
            period = period_at(index)
            data = self.config.data_source.data_for(schedule, period)
            if data is None:  # later periods wait too: advancing past this one would skip it forever
                result.waiting.append((schedule.id, period))
                return
            detail, created = self.requests.create(_spec(schedule, period, data), actor=self.config.actor)
            (result.created if created else result.existing).append(detail.request.id)
            self.store.advance_schedule(schedule.id, period, actor=self.config.actor,
                                        request_id=detail.request.id)


def _spec(schedule: Schedule, period: str, data: dict[str, Any]) -> RequestSpec:
    return RequestSpec(
        tenant=schedule.tenant, subject=schedule.subject, period=period,
        template=f"{schedule.template_id}@{schedule.template_version}", data=data,
        variant=schedule.variant, document_class=schedule.document_class, processor=schedule.processor,
        schedule_id=schedule.id,
    )
