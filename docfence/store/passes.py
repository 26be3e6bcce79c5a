"""The reconciler's two row passes (lease expiry, deadline) of the SQL stores (a mixin of SqlStore): each
moves a bounded batch of due rows, reports the due rows it skipped because another session held their
lock, and can move one such row by waiting (briefly) for its lock: the escalation of a skipped row.
Also names the sessions that hold a job's row lock (`docfence inspect`), and ends docfence's own
sessions that hold a due row's lock past every wait (the last step of an escalation)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from docfence.core.records import Job
from docfence.core.states import Event, JobState, transition
from docfence.store.pg_session import DEFAULT_APPLICATION_NAME
from docfence.store.sqlbase import Row, SqlBase, Tx

_EXHAUSTED_MESSAGE = "lease expired and attempts are exhausted"
#: Sessions whose application_name starts with this are docfence's own (docfence, docfence-worker,
#: docfence-api, docfence-reconciler, ...): the only ones an escalation may terminate.
OWN_SESSION_PREFIX = DEFAULT_APPLICATION_NAME


@dataclass(frozen=True)
class SkippedRow:
    """A due row a pass did not move because another session held its row lock (PostgreSQL's SKIP
    LOCKED; SQLite has one writer and never skips)."""

    job_id: str
    attempt: int
    state: str
    lease_ttl_s: float  # the job's lease: how long a skip may last before it is escalated


@dataclass(frozen=True)
class PassResult:
    """What one pass moved, what it skipped for a lock, and the store's clock during the pass."""

    moved: list[Job]
    skipped: list[SkippedRow]
    now: datetime | None  # None when nothing was skipped (the clock is read with the skipped rows)


@dataclass(frozen=True)
class RowLockHolder:
    """A database session holding a job's row lock (PostgreSQL; SQLite has no sessions)."""

    pid: int
    application_name: str  # docfence-worker, docfence-api, ... or whatever another client set
    state: str  # pg_stat_activity's: "idle in transaction", "active", ...
    state_s: float  # seconds in that state
    transaction_s: float  # seconds since its transaction began


@dataclass(frozen=True)
class HolderVerdict:
    """A session an escalation found holding a due row's lock, and whether it was terminated: only
    docfence's own sessions are (OWN_SESSION_PREFIX); another client's is reported, never ended."""

    holder: RowLockHolder
    terminated: bool  # pg_terminate_backend signalled it and it exited within the wait

    @property
    def own(self) -> bool:
        return self.holder.application_name.startswith(OWN_SESSION_PREFIX)


@dataclass(frozen=True)
class _DueRows:
    """The queries of one pass over due rows, named after the pass (its event): lock a batch of them
    (SKIP LOCKED), read back those skipped for a lock (in `order_key` order), lock one of them waiting."""

    name: str  # the pass, as terminate_due_holders' :due names it
    select: str
    skipped: str
    lock: str
    order_key: str


_LEASE_EXPIRED = _DueRows(Event.LEASE_EXPIRED.value, "select_expired_leases", "skipped_expired_leases",
                          "lock_expired_lease", "lease_expires_at")
_DEADLINE_REACHED = _DueRows(Event.DEADLINE_REACHED.value, "select_past_deadline", "skipped_past_deadline",
                             "lock_past_deadline", "deadline_at")
_Move = Callable[[Tx, Row], Job | None]  # one locked candidate's transition; None when no longer due


class ReconcilePasses(SqlBase):
    """Rows LEASE_EXPIRED / LEASE_EXPIRED_EXHAUSTED and DEADLINE_REACHED, applied by the reconciler."""

    def requeue_expired(self, *, batch: int = 100) -> list[Job]:
        """Rows LEASE_EXPIRED (queued again) and, when attempts are exhausted, LEASE_EXPIRED_EXHAUSTED
        (failed) for jobs whose lease expired, in one bounded batch. Never a valid lease."""
        return self.requeue_expired_pass(batch=batch).moved

    def requeue_expired_pass(self, *, batch: int = 100) -> PassResult:
        """`requeue_expired`, also answering the expired rows it skipped because they were locked."""
        return self._due_pass(_LEASE_EXPIRED, self._rescue_lease, batch)

    def cancel_past_deadline(self, *, batch: int = 100) -> list[Job]:
        """Row DEADLINE_REACHED (from queued or rendering) for jobs past their deadline, in one
        bounded batch."""
        return self.cancel_past_deadline_pass(batch=batch).moved

    def cancel_past_deadline_pass(self, *, batch: int = 100) -> PassResult:
        """`cancel_past_deadline`, also answering the rows past their deadline it skipped for a lock."""
        return self._due_pass(_DEADLINE_REACHED, self._cancel_for_deadline, batch)

    def escalate_expired_lease(self, job_id: str, attempt: int, *, lock_timeout_s: float) -> Job | None:
        """Requeue (or fail) one expired lease a pass kept skipping, WAITING up to `lock_timeout_s` for
        its row lock instead of skipping it. None when the row is no longer that expired attempt (its
        holder committed a heartbeat or an outcome): never a valid lease. Raises StoreUnavailable when
        the lock is still held after the wait (nothing written; a later pass tries again)."""
        return self._escalate(_LEASE_EXPIRED, self._rescue_lease, job_id, attempt, lock_timeout_s)

    def escalate_past_deadline(self, job_id: str, attempt: int, *, lock_timeout_s: float) -> Job | None:
        """Cancel one job past its deadline that a pass kept skipping, waiting up to `lock_timeout_s`
        for its row lock. None when it is no longer that attempt past its deadline; StoreUnavailable
        when the lock is still held after the wait."""
        return self._escalate(_DEADLINE_REACHED, self._cancel_for_deadline, job_id, attempt, lock_timeout_s)

    def row_lock_holders(self, job_id: str) -> list[RowLockHolder]:
        """The sessions holding job `job_id`'s row lock right now (none on SQLite)."""
        with self._tx(write=False) as tx:
            rows = tx.all("row_lock_holders", id=job_id)
        return [_holder(r) for r in rows]

    def terminate_expired_lease_holders(self, job_id: str, attempt: int, *,
                                        wait_s: float) -> list[HolderVerdict]:
        """End docfence's own sessions holding the row lock of job `job_id` while it is still `attempt`
        with an expired lease by the store's clock (never a valid lease): pg_terminate_backend, waiting
        up to `wait_s` for each to exit, rolls their transactions back and frees the row. Another
        client's session is answered, not ended. No rows on SQLite. Raises StoreError when the server
        refuses (a session of another role: permission denied)."""
        return self._terminate_due_holders(_LEASE_EXPIRED, job_id, attempt, wait_s)

    def terminate_past_deadline_holders(self, job_id: str, attempt: int, *,
                                        wait_s: float) -> list[HolderVerdict]:
        """As `terminate_expired_lease_holders`, for a job still `attempt` and past its deadline."""
        return self._terminate_due_holders(_DEADLINE_REACHED, job_id, attempt, wait_s)

    # -- one pass, either kind -----------------------------------------------------------------------
    def _due_pass(self, due: _DueRows, move: _Move, batch: int) -> PassResult:
        """Lock a bounded batch of `due`'s rows (SKIP LOCKED), `move` each, and read back the due rows
        skipped for a lock; wake workers and waiters once it commits."""
        with self._tx() as tx:
            cands = tx.all(due.select, limit=batch, now=self._now_param())
            moved = [job for cand in cands if (job := move(tx, cand)) is not None]
            skipped, now = self._skipped(tx, due.skipped, cands, due.order_key, batch)
            _announce(tx, moved)
        return PassResult(moved, skipped, now)

    def _escalate(self, due: _DueRows, move: _Move, job_id: str, attempt: int,
                  lock_timeout_s: float) -> Job | None:
        """Lock one of `due`'s rows, waiting up to `lock_timeout_s`, and `move` it if still due."""
        with self._tx() as tx:
            tx.one("set_lock_timeout", lock_timeout=f"{max(1, round(lock_timeout_s * 1000))}ms")
            cand = tx.one(due.lock, id=job_id, attempt=attempt, now=self._now_param())
            job = move(tx, cand) if cand is not None else None
            _announce(tx, [job] if job else [])
        return job

    def _terminate_due_holders(self, due: _DueRows, job_id: str, attempt: int,
                               wait_s: float) -> list[HolderVerdict]:
        with self._tx() as tx:
            rows = tx.all("terminate_due_holders", id=job_id, attempt=attempt, due=due.name,
                          now=self._now_param(), own_prefix=OWN_SESSION_PREFIX,
                          wait_ms=max(1, round(wait_s * 1000)))
        return [HolderVerdict(_holder(r), bool(r["terminated"])) for r in rows]

    # -- one row each --------------------------------------------------------------------------------
    def _rescue_lease(self, tx: Tx, cand: Row) -> Job | None:
        """Row LEASE_EXPIRED(_EXHAUSTED) for one locked candidate; None if it was no longer expired."""
        exhausted = cand["attempt"] >= cand["max_attempts"]
        event = Event.LEASE_EXPIRED_EXHAUSTED if exhausted else Event.LEASE_EXPIRED
        t = transition(event, JobState.RENDERING)
        rows = self._apply(tx, t, id=cand["id"], attempt=cand["attempt"],
                           error_code="lease_expired" if exhausted else None,
                           error_message=_EXHAUSTED_MESSAGE if exhausted else None)
        if not rows:
            return None
        self._end_attempt(tx, rows[0], t.event, "lease_expired")
        self._audit_transition(tx, t, [(rows[0], None, "reconciler")])
        return self._job(rows[0])

    def _cancel_for_deadline(self, tx: Tx, cand: Row) -> Job | None:
        """Row DEADLINE_REACHED for one locked candidate; None if it no longer matched."""
        t = transition(Event.DEADLINE_REACHED, JobState(cand["state"]))
        rows = self._apply(tx, t, id=cand["id"], attempt=cand["attempt"],
                           error_code="deadline_exceeded", error_message="the job's deadline passed")
        if not rows:
            return None
        self._close_if_rendering(tx, rows[0], t)
        self._audit_transition(tx, t, [(rows[0], None, "reconciler")])
        return self._job(rows[0])

    def _skipped(self, tx: Tx, query: str, cands: list[Row], key: str,
                 batch: int) -> tuple[list[SkippedRow], datetime | None]:
        """The due rows a SKIP LOCKED batch passed over: read again without locking, up to the order key
        of its last candidate when the batch was full (rows beyond it were not reached, not skipped)."""
        last = cands[-1] if len(cands) >= batch else None
        rows = tx.all(query, now=self._now_param(), limit=batch, taken=json.dumps([c["id"] for c in cands]),
                      last_at=last[key] if last else None, last_id=last["id"] if last else None)
        now = rows[0]["now"] if rows else None
        skipped = [SkippedRow(r["id"], int(r["attempt"]), r["state"], float(r["lease_ttl_s"])) for r in rows]
        return skipped, now


def _holder(r: Row) -> RowLockHolder:
    return RowLockHolder(int(r["pid"]), str(r["application_name"] or ""), str(r["state"] or "unknown"),
                         float(r["state_s"] or 0.0), float(r["xact_s"] or 0.0))


def _announce(tx: Tx, moved: list[Job]) -> None:
    """Wake workers for requeued jobs and waiters for ended ones, once the pass commits."""
    if any(not job.state.terminal for job in moved):
        tx.announce_work()
    ended = [job.id for job in moved if job.state.terminal]
    if ended:
        tx.announce_job_end(ended)
