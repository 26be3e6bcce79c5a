"""The reconciler's passes see the due rows they skip because another session holds their lock: they
count and name them, and once a row stays skipped beyond the bound they wait (bounded) for its lock
and move it, never a valid lease. SQLite, one writer, never skips."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from docfence.core.clock import FakeClock
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.core.states import JobState
from docfence.maintenance.batch import BatchConfig
from docfence.maintenance.deadlines import DeadlineCanceller
from docfence.maintenance.lease_rescue import LeaseRescuer, LeaseRescueResult
from docfence.maintenance.reconciler import ReconcileConfig, Reconciler
from docfence.maintenance.skipped import SkipBound
from docfence.observability import metrics
from docfence.store.postgres import PostgresStore
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.procs import wait_for

LOCK = "SELECT id FROM jobs WHERE id = %s FOR UPDATE"


def _submit(store: Any, **policy: Any) -> str:
    return str(store.submit(NewJob(tenant="t1", policy=JobPolicy(**policy)))[0].id)


def _counted(pass_name: str) -> tuple[float, float]:
    return (metrics.SKIPPED_LOCKED.labels(pass_name)._value.get(),
            metrics.SKIPPED_LOCKED_ESCALATED.labels(pass_name)._value.get())


@pytest.fixture
def holder(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    """Another client's session, free of docfence's limits: it locks rows and keeps them."""
    conn = psycopg.connect(pg_url, autocommit=True, application_name="other-client")
    try:
        yield conn
    finally:
        conn.close()


def _in_thread(store: PostgresStore, run: Any, outcome: dict[str, Any]) -> threading.Thread:
    """Run one pass in its own thread (and close that thread's connection afterwards)."""
    def target() -> None:
        try:
            outcome["r"] = run()
        finally:
            store._drop()

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def _expired_and_locked(pg: PostgresStore, clock: FakeClock, holder: psycopg.Connection[Any]) -> str:
    """A rendering job whose lease has expired, its row locked by `holder` (which then goes quiet)."""
    job = _submit(pg, lease_ttl_s=10)
    pg.claim("w")
    clock.advance(11)
    holder.execute("BEGIN")
    holder.execute(LOCK, (job,))
    return job


def _while_waiting(pg: PostgresStore, pg_url: str, run: Any, end_holder: Any) -> Any:
    """Run one pass in a thread; once the store's session waits for a row lock, end the holder's
    transaction (`end_holder`); the pass's answer."""
    outcome: dict[str, Any] = {}
    waiting = _in_thread(pg, run, outcome)
    wait_for(lambda: _waiting_for_a_lock(pg_url), HANG_GUARD_S, "the escalation to wait for the row lock")
    end_holder()
    waiting.join(HANG_GUARD_S)
    return outcome["r"]


def _waiting_for_a_lock(pg_url: str) -> bool:
    with psycopg.connect(pg_url, autocommit=True) as watcher:
        row = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'docfence' "
                              "AND wait_event_type = 'Lock'").fetchone()
    return row is not None and row[0] > 0


def test_all_passes_report_nothing_skipped_when_no_session_holds_a_row(store: Any, clock: FakeClock) -> None:
    """Both dialects; on SQLite (one writer) this is always the answer."""
    expired = _submit(store, lease_ttl_s=10)
    late = _submit(store, deadline_s=5)
    store.claim("w")
    clock.advance(11)
    result = Reconciler(store, None, ReconcileConfig()).run_once()
    assert result.requeued == [expired] and result.canceled == [late]
    assert result.skipped_locked == {"lease_expired": [], "deadline_reached": []}
    assert result.escalated == {"lease_expired": [], "deadline_reached": []}


@pytest.mark.postgres
def test_a_locked_expired_lease_is_counted_then_escalated_once_its_holder_lets_go(
    pg: PostgresStore, pg_url: str, clock: FakeClock, holder: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = _expired_and_locked(pg, clock, holder)
    rescue = LeaseRescuer(pg, BatchConfig(), SkipBound(passes=2, lock_timeout_s=0.05))
    before = _counted("lease_expired")
    with caplog.at_level(logging.WARNING, "docfence.reconciler"):
        first = rescue.run_once()
        second = rescue.run_once()  # beyond the bound: escalated, but the lock is still held
    assert first == LeaseRescueResult(skipped_locked=[job])
    assert second == LeaseRescueResult(skipped_locked=[job])
    logged = [r for r in caplog.records if getattr(r, "job_id", None) == job]
    assert "holds its row lock" in logged[0].getMessage() and "still locked" in logged[-2].getMessage()
    assert "not a docfence session: not terminated" in logged[-1].getMessage()  # another client's: kept
    assert _counted("lease_expired") == (before[0] + 2, before[1])

    rescue.skips.bound = SkipBound(passes=1, lock_timeout_s=HANG_GUARD_S)
    # the holder ends (the server killed it, or it finished) while the escalation waits
    third = _while_waiting(pg, pg_url, rescue.run_once, lambda: holder.execute("ROLLBACK"))
    assert third == LeaseRescueResult(requeued=[job], skipped_locked=[job], escalated=[job])
    assert pg.get(job).state is JobState.QUEUED and pg.get(job).attempt == 1
    assert _counted("lease_expired") == (before[0] + 3, before[1] + 1)


@pytest.mark.postgres
def test_an_escalation_never_touches_a_lease_its_holder_renewed(
    pg: PostgresStore, pg_url: str, clock: FakeClock, holder: psycopg.Connection[Any],
) -> None:
    job = _expired_and_locked(pg, clock, holder)
    rescue = LeaseRescuer(pg, BatchConfig(), SkipBound(passes=1, lock_timeout_s=HANG_GUARD_S))

    def heartbeat_commits() -> None:  # the worker's heartbeat was what held the row: its lease is renewed
        renewed = clock.now().replace(year=2999)
        holder.execute("UPDATE jobs SET lease_expires_at = %s WHERE id = %s", (renewed, job))
        holder.execute("COMMIT")

    # the escalation got the lock and moved nothing: the lease is valid again
    assert _while_waiting(pg, pg_url, rescue.run_once, heartbeat_commits) == \
        LeaseRescueResult(skipped_locked=[job], escalated=[job])
    assert pg.get(job).state is JobState.RENDERING


@pytest.mark.postgres
def test_a_locked_row_past_its_deadline_is_escalated_after_a_lease_of_store_time(
    pg: PostgresStore, pg_url: str, clock: FakeClock, holder: psycopg.Connection[Any],
) -> None:
    job = _submit(pg, deadline_s=5, lease_ttl_s=10)
    clock.advance(6)
    holder.execute("BEGIN")
    holder.execute(LOCK, (job,))
    cancel = DeadlineCanceller(pg, BatchConfig(), SkipBound(passes=1000, lock_timeout_s=HANG_GUARD_S))
    assert cancel.run_pass().skipped_locked == [job]
    clock.advance(5)
    assert cancel.run_pass().escalated == []  # 5 s of store time skipped: under the job's lease
    clock.advance(5)  # 10 s: a whole lease
    late = _while_waiting(pg, pg_url, cancel.run_pass, lambda: holder.execute("ROLLBACK"))
    assert late.canceled == [job] and late.escalated == [job]
    assert pg.get(job).state is JobState.CANCELED


@pytest.mark.postgres
def test_rows_beyond_a_full_batch_are_not_counted_as_skipped(
    pg: PostgresStore, clock: FakeClock, holder: psycopg.Connection[Any],
) -> None:
    first, second, third = (_submit(pg, lease_ttl_s=10 + k) for k in range(3))
    pg.claim("w", limit=3)
    clock.advance(20)
    holder.execute("BEGIN")
    holder.execute(LOCK, (first,))
    passed = pg.requeue_expired_pass(batch=1)
    assert [j.id for j in passed.moved] == [second]
    assert [s.job_id for s in passed.skipped] == [first]  # the third was not reached, not skipped
    assert passed.now == clock.now()
    holder.execute("ROLLBACK")
    passed = pg.requeue_expired_pass(batch=5)
    assert {j.id for j in passed.moved} == {first, third} and passed.skipped == []


@pytest.mark.postgres
def test_inspect_names_the_session_holding_the_row_instead_of_blaming_the_reconciler(
    pg: PostgresStore, clock: FakeClock, holder: psycopg.Connection[Any],
) -> None:
    from docfence.observability.inspect import format_inspection, inspect_job, inspection_dict

    job = _expired_and_locked(pg, clock, holder)
    holder.execute("ROLLBACK")
    quiet = inspect_job(pg, job)
    assert quiet.lock_holders == [] and any("no reconciler is running" in s for s in quiet.next_steps)
    holder.execute("BEGIN")
    holder.execute(LOCK, (job,))
    ins = inspect_job(pg, job)
    (held,) = ins.lock_holders
    assert (held.pid, held.application_name, held.state) == (holder.info.backend_pid, "other-client",
                                                             "idle in transaction")
    text = format_inspection(ins)
    assert "no reconciler is running" not in text
    assert f"locked by database session {held.pid} (other-client, idle in transaction for" in text
    assert inspection_dict(ins)["lock_holders"][0]["application_name"] == "other-client"
    holder.execute("ROLLBACK")
    assert inspect_job(pg, job).lock_holders == []


def test_inspect_finds_no_holder_on_either_dialect_when_nothing_holds_the_row(store: Any,
                                                                            clock: FakeClock) -> None:
    job = _submit(store, lease_ttl_s=10)
    store.claim("w")
    clock.advance(11)
    assert store.row_lock_holders(job) == []


def test_an_escalation_moves_only_that_expired_attempt_on_either_dialect(store: Any,
                                                                        clock: FakeClock) -> None:
    valid = _submit(store, lease_ttl_s=100)
    expired = _submit(store, lease_ttl_s=10)
    late = _submit(store, deadline_s=5)
    store.claim("w", limit=2)
    clock.advance(11)
    assert store.escalate_expired_lease(valid, 1, lock_timeout_s=1.0) is None  # a valid lease: untouched
    assert store.escalate_expired_lease(expired, 2, lock_timeout_s=1.0) is None  # not that attempt
    assert store.escalate_past_deadline(expired, 1, lock_timeout_s=1.0) is None  # its deadline is far
    moved = store.escalate_expired_lease(expired, 1, lock_timeout_s=1.0)
    assert moved is not None and moved.state is JobState.QUEUED
    canceled = store.escalate_past_deadline(late, 0, lock_timeout_s=1.0)
    assert canceled is not None and canceled.state is JobState.CANCELED
    assert store.get(valid).state is JobState.RENDERING
    assert [e.action for e in store.audit_events(expired)][-1] == "lease_expired"
