"""An escalation that still finds a due row locked after its wait terminates the holding session when it
is docfence's own (its attempt is fenced out already), then applies the transition; the killed
attempt's late commit is stale. Another client's session is reported, never ended. The holders here sit
"active" inside their transaction, as a client cut off after a pipelined statement without its Sync
does: idle_in_transaction_session_timeout never starts for them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import StaleAttempt, StoreError, StoreUnavailable
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, NewJob
from docfence.core.states import JobState
from docfence.maintenance.batch import BatchConfig
from docfence.maintenance.deadlines import DeadlineCanceller
from docfence.maintenance.lease_rescue import LeaseRescuer, LeaseRescueResult
from docfence.maintenance.skipped import SkipBound, SkippedRows
from docfence.store.passes import PassResult, SkippedRow
from docfence.store.postgres import PostgresStore
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.procs import wait_for

LOCK = "SELECT id FROM jobs WHERE id = %s FOR UPDATE"
QUICK = SkipBound(passes=1, lock_timeout_s=0.05, terminate_wait_s=HANG_GUARD_S)


def _submit(store: Any, **policy: Any) -> str:
    return str(store.submit(NewJob(tenant="t1", policy=JobPolicy(**policy)))[0].id)


class ActiveHolder:
    """A session free of docfence's limits that locks a job row inside a transaction and stays
    "active": BEGIN and the locking statement are pipelined and their Sync is never sent."""

    def __init__(self, url: str, application_name: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, application_name=application_name)
        self.pid = self.conn.info.backend_pid
        self._pipeline = self.conn.pipeline()

    def lock(self, store: PostgresStore, job_id: str) -> None:
        self._pipeline.__enter__()
        self.conn.execute("BEGIN")
        self.conn.execute(LOCK, (job_id,))  # written, executed by the server; no Sync follows
        wait_for(lambda: [h.pid for h in store.row_lock_holders(job_id)] == [self.pid], HANG_GUARD_S,
                 "the holder's session to lock the row")
        (held,) = store.row_lock_holders(job_id)
        assert held.state == "active"  # not "idle in transaction": the server's idle timeout never starts

    def alive(self, store: PostgresStore) -> bool:
        with psycopg.connect(store.url, autocommit=True) as watcher:
            found = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                    (self.pid,)).fetchone()
        return found is not None and found[0] == 1

    def close(self) -> None:
        self.conn.pgconn.finish()  # its pipeline may hold unread results, or the server ended it


@pytest.fixture
def holders(pg_url: str) -> Iterator[Any]:
    made: list[ActiveHolder] = []

    def make(application_name: str) -> ActiveHolder:
        made.append(ActiveHolder(pg_url, application_name))
        return made[-1]

    yield make
    for holder in made:
        holder.close()


def _expired(pg: PostgresStore, clock: FakeClock) -> str:
    job = _submit(pg, lease_ttl_s=10)
    (claim,) = pg.claim("w")
    assert claim.attempt == 1
    clock.advance(11)
    return job


def _rescue_held_lease(pg: PostgresStore, clock: FakeClock, holder: ActiveHolder,
                       caplog: pytest.LogCaptureFixture) -> tuple[str, ActiveHolder, LeaseRescueResult]:
    """An expired lease whose row `holder` locks, and one lease-rescue pass over it (warnings captured)."""
    job = _expired(pg, clock)
    holder.lock(pg, job)
    with caplog.at_level(logging.WARNING, "docfence.reconciler"):
        result = LeaseRescuer(pg, BatchConfig(), QUICK).run_once()
    return job, holder, result


@pytest.mark.postgres
def test_a_docfence_session_holding_an_expired_lease_active_in_its_transaction_is_terminated(
    pg: PostgresStore, clock: FakeClock, holders: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    job, holder, result = _rescue_held_lease(pg, clock, holders("docfence-worker-test"), caplog)
    assert result.requeued == [job] and result.escalated == [job] and result.terminated == [job]
    assert pg.get(job).state is JobState.QUEUED and pg.get(job).attempt == 1
    assert not holder.alive(pg)
    (line,) = [r for r in caplog.records if "terminated database session" in r.getMessage()]
    assert (line.job_id, line.attempt, line.pid, line.application_name) == (  # type: ignore[attr-defined]
        job, 1, holder.pid, "docfence-worker-test")
    # the killed attempt's late commit, however it arrives, is fenced out
    with pytest.raises(StaleAttempt):
        pg.complete(job, 1, "w", ArtifactInfo(f"k/{job}", "ef" * 32, 10, 1))
    (again,) = pg.claim("w2")
    assert again.attempt == 2
    with pytest.raises(StaleAttempt):
        pg.complete(job, 1, "w", ArtifactInfo(f"k/{job}", "ef" * 32, 10, 1))


@pytest.mark.postgres
def test_another_clients_session_is_reported_and_never_terminated(
    pg: PostgresStore, clock: FakeClock, holders: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    job, holder, result = _rescue_held_lease(pg, clock, holders("other-client"), caplog)
    assert result.skipped_locked == [job] and result.escalated == [] and result.terminated == []
    assert holder.alive(pg) and pg.get(job).state is JobState.RENDERING
    (line,) = [r for r in caplog.records if "not a docfence session" in r.getMessage()]
    assert line.pid == holder.pid and line.application_name == "other-client"  # type: ignore[attr-defined]


@pytest.mark.postgres
def test_a_valid_lease_is_never_terminated_for(pg: PostgresStore, clock: FakeClock, holders: Any) -> None:
    job = _submit(pg, lease_ttl_s=100)
    pg.claim("w")
    holder = holders("docfence-worker-test")
    holder.lock(pg, job)
    assert pg.terminate_expired_lease_holders(job, 1, wait_s=1.0) == []
    assert pg.terminate_past_deadline_holders(job, 1, wait_s=1.0) == []  # its deadline is far
    clock.advance(101)
    assert pg.terminate_expired_lease_holders(job, 2, wait_s=1.0) == []  # not that attempt
    assert holder.alive(pg) and pg.get(job).state is JobState.RENDERING


@pytest.mark.postgres
def test_a_docfence_session_holding_a_job_past_its_deadline_is_terminated_and_the_job_canceled(
    pg: PostgresStore, clock: FakeClock, holders: Any,
) -> None:
    job = _submit(pg, deadline_s=5, lease_ttl_s=100)
    pg.claim("w")
    clock.advance(6)  # the lease is still valid: the deadline ends the attempt anyway
    holder = holders("docfence-worker-test")
    holder.lock(pg, job)
    result = DeadlineCanceller(pg, BatchConfig(), QUICK).run_pass()
    assert result.canceled == [job] and result.terminated == [job]
    assert pg.get(job).state is JobState.CANCELED and not holder.alive(pg)
    with pytest.raises(StaleAttempt):
        pg.complete(job, 1, "w", ArtifactInfo(f"k/{job}", "ef" * 32, 10, 1))


def test_no_session_is_ever_terminated_on_either_dialect_when_none_holds_the_row(
    store: Any, clock: FakeClock,
) -> None:
    job = _submit(store, lease_ttl_s=10, deadline_s=5)
    store.claim("w")
    clock.advance(11)
    assert store.terminate_expired_lease_holders(job, 1, wait_s=1.0) == []
    assert store.terminate_past_deadline_holders(job, 1, wait_s=1.0) == []


def test_a_refused_termination_is_a_warning_and_the_pass_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def still_locked(job_id: str, attempt: int, *, lock_timeout_s: float) -> None:
        raise StoreUnavailable("a PostgreSQL lock wait ran past lock_timeout")

    def refused(job_id: str, attempt: int, *, wait_s: float) -> list[Any]:
        raise StoreError("PostgreSQL denied a privilege the call needs (permission denied)")

    skips = SkippedRows("lease_expired", still_locked, QUICK, refused)
    passed = PassResult([], [SkippedRow("j1", 1, "rendering", 10.0)], datetime(2026, 1, 1, tzinfo=UTC))
    with caplog.at_level(logging.WARNING, "docfence.reconciler"):
        out = skips.handle(passed)
    assert out.skipped == ["j1"] and out.escalated == [] and out.terminated == []
    assert any("could not terminate" in r.getMessage() and "permission denied" in r.getMessage()
               for r in caplog.records)
