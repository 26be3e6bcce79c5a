"""The one loop shape (docfence.core.loops): a pass that raises anything is one log line and a count, and
the loop goes on; the webhook dispatcher, the scheduler and the report dispatcher run under it, and one
bad schedule (a broken data file, an unexpected exception) is reported while the others still run."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from docfence.core import loops
from docfence.core.errors import StoreUnavailable
from docfence.core.records import Schedule
from docfence.observability import metrics
from docfence.reports.scheduler import DirectoryDataSource, Scheduler, SchedulerConfig, SchedulerResult

SECRET = "patient-name-in-a-message"  # an exception message: it must never reach the log


class Passes:
    """A run_once that raises `errors` in turn, then succeeds and sets `stop` (the loop must go on)."""

    def __init__(self, stop: threading.Event, *errors: Exception) -> None:
        self.stop, self.errors, self.calls = stop, list(errors), 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        self.stop.set()
        return "ok"


def test_a_pass_that_raises_anything_is_logged_counted_and_the_loop_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    passes = Passes(stop, ValueError(SECRET), StoreUnavailable("database down"))
    counted: list[str] = []
    with caplog.at_level(logging.WARNING, logger="docfence.loops"):
        loops.run_forever("probe", passes, interval_s=0.001, stop=stop, record_error=counted.append)
    assert passes.calls == 3 and stop.is_set()
    assert counted == ["probe", "probe"]
    unexpected, known = caplog.records
    assert unexpected.levelno == logging.ERROR
    assert unexpected.getMessage().startswith("probe pass failed: unexpected ValueError\nTraceback")
    assert "in __call__" in unexpected.getMessage() and "builtins.ValueError" in unexpected.getMessage()
    assert (known.levelno, known.getMessage()) == (logging.WARNING, "probe pass failed: store_unavailable")
    assert SECRET not in caplog.text


def test_the_loop_runs_in_a_thread_until_stopped_and_outlives_the_error() -> None:
    stop, ran_twice = threading.Event(), threading.Event()
    calls: list[int] = []

    def run_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError(SECRET)
        ran_twice.set()
        stop.wait()  # hold here until the test stops the loop

    thread = threading.Thread(target=loops.run_forever, args=("probe", run_once), daemon=True,
                              kwargs={"interval_s": 0.001, "stop": stop, "record_error": lambda _: None})
    thread.start()
    assert ran_twice.wait(30)
    stop.set()
    thread.join(30)
    assert not thread.is_alive() and len(calls) == 2


def test_a_busy_pass_is_followed_at_once_and_an_interrupt_still_ends_the_loop() -> None:
    stop = threading.Event()
    calls: list[int] = []

    def run_once() -> bool:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return True

    # an hour's interval: had a busy pass waited, this test would time out
    with pytest.raises(KeyboardInterrupt):
        loops.run_forever("probe", run_once, interval_s=3600, stop=stop, record_error=lambda _: None,
                          busy=bool)
    assert len(calls) == 3


def test_backoff_doubles_after_repeated_failures_up_to_its_cap() -> None:
    assert [loops.backoff(1.0, n, 10.0) for n in (1, 2, 3, 4, 5, 50)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert loops.backoff(2.0, 7, None) == 2.0


def test_the_safe_traceback_keeps_frames_and_types_but_no_message() -> None:
    def inner() -> None:
        raise KeyError(SECRET)

    try:
        try:
            inner()
        except KeyError as exc:
            raise RuntimeError(SECRET) from exc
    except RuntimeError as exc:
        text = loops.safe_traceback(exc)
    assert SECRET not in text
    assert "in inner" in text and "builtins.KeyError" in text and "builtins.RuntimeError" in text
    assert text.index("KeyError") < text.index("direct cause") < text.index("RuntimeError")


def test_the_webhook_dispatcher_loop_survives_an_unexpected_error(tmp_path: Path) -> None:
    from docfence.config import WebhooksConfig
    from docfence.maintenance.webhooks import DispatchResult, WebhookDispatcher
    from docfence.store import open_store

    store = open_store(f"sqlite:///{tmp_path}/w.db")
    try:
        dispatcher = WebhookDispatcher(store, WebhooksConfig(), worker="w1", interval_s=0.001)
        stop = threading.Event()
        passes = Passes(stop, ValueError(SECRET))
        dispatcher.run_once = lambda: (passes(), DispatchResult())[1]  # type: ignore[method-assign]
        before = _loop_errors("webhooks")
        dispatcher.run_forever(stop)
        assert passes.calls == 2 and _loop_errors("webhooks") == before + 1
    finally:
        store.close()


@dataclass
class FakeSchedules:
    """The part of the store and the request use cases the scheduler calls."""

    schedules: list[Schedule]
    advanced: list[tuple[str, str]] = field(default_factory=list)
    store: Any = None
    list_calls: int = 0

    def __post_init__(self) -> None:
        self.store = self

    def list_schedules(self) -> list[Schedule]:
        self.list_calls += 1
        return self.schedules

    def advance_schedule(self, schedule_id: str, period: str, **_: Any) -> None:
        self.advanced.append((schedule_id, period))

    def create(self, spec: Any, *, actor: str) -> tuple[Any, bool]:
        request = type("Req", (), {"id": f"req-{spec.schedule_id}-{spec.period}"})()
        return type("Detail", (), {"request": request})(), True


def _schedule(sid: str, tenant: str) -> Schedule:
    return Schedule(sid, tenant, "clinic", "monthly", 1, 1, 0, None, "default", "local", "2025-12",
                    datetime(2025, 12, 1, tzinfo=UTC), "test")


def _loop_errors(loop: str) -> float:
    value = metrics.LOOP_ERRORS.labels(loop)._value.get()
    return float(value)


@dataclass(frozen=True)
class BrokenFor(DirectoryDataSource):
    """The directory's files, except that reading one tenant's data raises what nobody expected."""

    broken_tenant: str = ""

    def data_for(self, schedule: Schedule, period: str) -> dict[str, Any] | None:
        if schedule.tenant == self.broken_tenant:
            raise PermissionError(13, SECRET)
        return super().data_for(schedule, period)


def test_one_bad_schedule_is_reported_and_the_later_ones_still_run(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    names = ["bad_json", "not_a_dict", "unreadable", "good"]
    fake = FakeSchedules([_schedule(f"sch_{n}", f"t-{n.replace('_', '-')}") for n in names])
    for schedule, content in zip(fake.schedules, ["{not json", "[1, 2]", "{}", json.dumps({"a": 1})],
                                 strict=True):
        path = tmp_path / schedule.tenant / schedule.subject / "2026-01.json"
        path.parent.mkdir(parents=True)
        path.write_text(content)
    source = BrokenFor(tmp_path, broken_tenant="t-unreadable")
    scheduler = Scheduler(SchedulerConfig(data_source=source), fake)  # type: ignore[arg-type]
    before = _loop_errors("scheduler")
    with caplog.at_level(logging.WARNING, logger="docfence.reports.scheduler"):
        result = scheduler.run_once(datetime(2026, 2, 2, tzinfo=UTC))
    assert result.errors == [("sch_bad_json", "template_data_invalid"), ("sch_not_a_dict",
                             "template_data_invalid"), ("sch_unreadable", "internal_error")]
    assert result.created == ["req-sch_good-2026-01"] and fake.advanced == [("sch_good", "2026-01")]
    assert _loop_errors("scheduler") == before + 3
    levels = [(r.levelno, r.getMessage().split("\n")[0]) for r in caplog.records]
    assert levels == [(logging.WARNING, "schedule sch_bad_json failed: template_data_invalid"),
                      (logging.WARNING, "schedule sch_not_a_dict failed: template_data_invalid"),
                      (logging.ERROR, "schedule sch_unreadable failed: unexpected PermissionError")]
    assert "in data_for" in caplog.text and SECRET not in caplog.text


def test_the_scheduler_loop_survives_a_failing_pass() -> None:
    fake = FakeSchedules([])
    source = DirectoryDataSource(Path("/nonexistent"))
    scheduler = Scheduler(SchedulerConfig(data_source=source), fake)  # type: ignore[arg-type]
    stop = threading.Event()
    passes = Passes(stop, ValueError(SECRET))

    def list_schedules() -> list[Schedule]:
        passes()
        return []

    fake.list_schedules = list_schedules  # type: ignore[method-assign]
    seen: list[SchedulerResult] = []
    scheduler.run_forever(stop, interval_s=0.001, now=lambda: datetime(2026, 2, 2, tzinfo=UTC),
                          on_pass=seen.append)
    assert passes.calls == 2 and seen == [SchedulerResult()]


class FakeProviderStore:
    """The calls the report dispatcher makes around an unexpected error: claims, and `fail`."""

    def __init__(self, claims: list[Any]) -> None:
        self.claims = claims
        self.failed: list[tuple[str, int, str, str, bool]] = []

    def claim_provider_jobs(self, worker: str, processors: list[str], *, limit: int) -> list[Any]:
        return self.claims

    def fail(self, job_id: str, attempt: int, worker: str, code: str, message: str, *,
             retryable: bool) -> Any:
        self.failed.append((job_id, attempt, code, message, retryable))
        return SimpleNamespace(state=SimpleNamespace(terminal=False))


def test_one_provider_job_s_unexpected_error_fails_its_attempt_and_the_pass_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    from docfence.reports.dispatcher import Dispatcher, DispatcherConfig

    claims = [SimpleNamespace(job=SimpleNamespace(id=f"job_{i}"), attempt=1, worker="d1") for i in (1, 2)]
    store = FakeProviderStore(claims)
    dispatcher = Dispatcher(DispatcherConfig(providers={}), store, None, sandbox=object())  # type: ignore[arg-type]

    def render(claim: Any) -> str:
        if claim.job.id == "job_1":
            raise ValueError(SECRET)
        return "succeeded"

    dispatcher.render_through_provider = render  # type: ignore[method-assign]
    before = _loop_errors("report_dispatcher")
    with caplog.at_level(logging.ERROR, logger="docfence.reports.dispatcher"):
        result = dispatcher.run_once()
    assert (result.claimed, result.retried, result.succeeded) == (2, 1, 1)
    [(job_id, attempt, code, message, retryable)] = store.failed
    assert (job_id, attempt, code, retryable) == ("job_1", 1, "internal_error", True)
    [record] = caplog.records
    error_id = message.removeprefix("internal error (error id ").removesuffix(")")
    assert error_id.startswith("err_") and error_id in record.getMessage()
    assert (record.job_id, record.attempt) == ("job_1", 1)  # type: ignore[attr-defined]
    assert "in render" in record.getMessage() and SECRET not in caplog.text
    assert _loop_errors("report_dispatcher") == before + 1
