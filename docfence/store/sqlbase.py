"""What both SQL dialects share below the transitions: the transaction seam, row mapping, and
appending hash-chained audit events inside a transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol

from docfence.core.clock import Clock
from docfence.core.errors import IllegalTransition, NotFound
from docfence.core.policy import JobPolicy
from docfence.core.records import ApiKey, AuditEvent, Claim, Job
from docfence.core.states import Event, JobState, transition
from docfence.store.audit import event_hash
from docfence.store.outbox import append_outbox

Row = dict[str, Any]


class Tx(Protocol):
    """One open transaction running named queries."""

    def one(self, name: str, **params: Any) -> Row | None: ...
    def all(self, name: str, **params: Any) -> list[Row]: ...
    def run(self, name: str, **params: Any) -> int: ...
    def send(self, name: str, **params: Any) -> None:
        """Run without waiting for the outcome (PostgreSQL pipelines it; errors surface at commit)."""
    def send_many(self, name: str, rows: Sequence[dict[str, Any]]) -> None:
        """`send` once per parameter set, as one prepared statement (executemany)."""
    def announce_work(self) -> None:
        """Wake idle workers (jobs were queued) once this transaction commits; never if it rolls back."""
    def announce_job_end(self, job_ids: Sequence[str]) -> None:
        """Wake the waiters of these jobs (now terminal) once this transaction commits; never if it
        rolls back."""


class SqlBase:
    """Dialects supply `_tx()`; the store classes above build every operation from named queries."""

    dialect = "sql"
    #: How many write transactions a process should run at once against this store; callers with
    #: many writing threads (the API service) queue the rest in-process.
    write_slots = 1

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock

    # -- dialect hooks -------------------------------------------------------------------------
    def _tx(self, *, write: bool = True) -> AbstractContextManager[Tx]:
        raise NotImplementedError

    def migrate(self) -> list[str]:
        """Apply pending migrations in order; returns the names applied."""
        raise NotImplementedError

    def close(self) -> None:
        """Close this thread's connection and release this store's share of the wake-up listener."""
        raise NotImplementedError

    def run_script(self, name: str) -> None:
        """Run a multi-statement named query (tests use `truncate_all`)."""
        raise NotImplementedError

    def drop_connection(self) -> None:
        """Close this thread's connection abruptly, as a network drop would (fault tests)."""
        raise NotImplementedError

    def _now_param(self) -> datetime | None:
        return self.clock.now() if self.clock is not None else None

    # -- clock ---------------------------------------------------------------------------------
    def now(self) -> datetime:
        with self._tx(write=False) as tx:
            row = tx.one("store_now", now=self._now_param())
        assert row is not None
        now: datetime = row["now"]
        return now

    # -- audit and operations --------------------------------------------------------------------
    def record_event(
        self, action: str, *, actor: str, job_id: str | None = None, reason: str | None = None,
        details: dict[str, Any] | None = None, chain: str = "operations",
    ) -> AuditEvent:
        """Append a non-transition event (download, deletion, configuration change)."""
        with self._tx() as tx:
            return self._append_event(tx, action, actor=actor, job_id=job_id, reason=reason,
                                      details=details or {}, chain=chain)

    def _append_event(
        self, tx: Tx, action: str, *, actor: str, job_id: str | None, reason: str | None,
        details: dict[str, Any], chain: str,
    ) -> AuditEvent:
        if job_id is not None:
            head = tx.one("bump_job_audit", id=job_id, now=self._now_param())
            if head is None:
                raise NotFound(f"no job {job_id}")
            chain, seq, at = job_id, head["audit_seq"], head["now"]
            prev = self._prev_hash(tx, job_id, seq)
            attempt, state = head["attempt"], head["state"]
        else:
            head = tx.one("lock_chain", chain=chain, now=self._now_param())
            seq = (head["seq"] or 0) + 1 if head and head["seq"] is not None else 1
            prev = head["hash"] if head and head["hash"] else ""
            at = head["now"] if head and head.get("now") else self._db_now(tx)
            attempt, state = None, None
        fields = {"job_id": job_id, "attempt": attempt, "actor": actor, "action": action,
                  "from_state": state, "to_state": state, "reason": reason, "at": at, "details": details}
        digest = self._insert_event(tx, chain, seq, prev, fields)
        if job_id is None:
            tx.send("upsert_chain", chain=chain, seq=seq, hash=digest)
        return AuditEvent(seq=0, chain=chain, chain_seq=seq, prev_hash=prev, hash=digest, **fields)

    def _db_now(self, tx: Tx) -> datetime:
        row = tx.one("store_now", now=self._now_param())
        assert row is not None
        now: datetime = row["now"]
        return now

    def _record_claims(self, tx: Tx, rows: list[Row], worker: str) -> list[Claim]:
        """The evidence of leases just taken (`rows` moved queued -> rendering in `tx`): one attempt
        row and one audit event per job, each written as one batch."""
        tx.send_many("insert_attempt", [
            {"job_id": r["id"], "attempt": r["attempt"], "worker": worker, "claimed_at": r["claimed_at"]}
            for r in rows
        ])
        self._append_job_events(tx, [(r, self._job_event_fields(
            r, Event.LEASE_ACQUIRED, actor=worker, from_state=JobState.QUEUED,
            to_state=JobState.RENDERING, details={"lease_expires_at": _iso(r["lease_expires_at"])},
        )) for r in rows])
        claims = []
        for row in rows:
            job = self._job(row)
            claims.append(Claim(job, job.attempt, worker, row["lease_expires_at"]))
        return claims

    def _append_job_event(
        self, tx: Tx, row: Row, event: Event, *, actor: str, from_state: JobState | None,
        to_state: JobState, details: dict[str, Any] | None = None, reason_detail: str | None = None,
    ) -> None:
        self._append_job_events(tx, [(row, self._job_event_fields(
            row, event, actor=actor, from_state=from_state, to_state=to_state, details=details,
            reason_detail=reason_detail))])

    def _job_event_fields(
        self, row: Row, event: Event, *, actor: str, from_state: JobState | None,
        to_state: JobState, details: dict[str, Any] | None = None, reason_detail: str | None = None,
    ) -> dict[str, Any]:
        """The audit event of a transition just written to `row`; refuses one outside the table."""
        if transition(event, from_state).target is not to_state:
            raise IllegalTransition(f"{event.value} does not lead to {to_state.value}")
        return {
            "job_id": row["id"], "attempt": row["attempt"], "actor": actor, "action": event.value,
            "from_state": from_state.value if from_state else None, "to_state": to_state.value,
            "reason": reason_detail or event.value, "at": row["updated_at"], "details": details or {},
        }

    def _append_job_events(self, tx: Tx, events: Sequence[tuple[Row, dict[str, Any]]]) -> None:
        """Append one event to each job's chain (rows just updated: the row lock serialises each chain).
        The previous hashes come with the rows or from one query; the events are written as one batch."""
        if not events:
            return
        # Transitions that return `prev_hash` read it in their own statement. On PostgreSQL that
        # statement's snapshot can predate an event committed just before it locked the row (the
        # row's newest version is locked, the event is not visible): NULL then, and the hash is
        # looked up again by a later statement, which sees it.
        links = [(row["id"], row["audit_seq"] - 1) for row, _ in events
                 if row["audit_seq"] > 1 and row.get("prev_hash") is None]
        prev: dict[tuple[str, int], str] = {}
        if links:
            for r in tx.all("prev_audit_hashes", links=json.dumps(links)):
                if r["hash"] is not None:
                    prev[(r["chain"], int(r["chain_seq"]))] = str(r["hash"])
        batch = []
        for row, fields in events:
            chain, seq = row["id"], row["audit_seq"]
            prev_hash = row.get("prev_hash") or prev.get((chain, seq - 1), "")
            batch.append(self._event_params(chain, seq, prev_hash, fields))
        tx.send_many("insert_audit", batch)
        append_outbox(tx, events)  # terminal transitions: webhook events, in this same transaction

    def _prev_hash(self, tx: Tx, chain: str, seq: int) -> str:
        """The previous event's hash of a job chain (the job row lock serialises the chain)."""
        if seq <= 1:
            return ""
        row = tx.one("prev_audit_hashes", links=json.dumps([[chain, seq - 1]]))
        return str(row["hash"]) if row and row["hash"] is not None else ""

    def _insert_event(self, tx: Tx, chain: str, seq: int, prev: str, fields: dict[str, Any]) -> str:
        params = self._event_params(chain, seq, prev, fields)
        tx.send("insert_audit", **params)
        return str(params["hash"])

    @staticmethod
    def _event_params(chain: str, seq: int, prev: str, fields: dict[str, Any]) -> dict[str, Any]:
        digest = event_hash(prev, chain, seq, fields)
        return dict(fields, details=json.dumps(fields["details"], sort_keys=True), chain=chain,
                    chain_seq=seq, prev_hash=prev, hash=digest)

    # -- row mapping -------------------------------------------------------------------------------
    def _job(self, row: Row) -> Job:
        data = {k: row[k] for k in _JOB_FIELDS}
        data["state"] = JobState(row["state"])
        data["policy"] = _policy(row["policy"])
        data["sealed_password"] = bool(data["sealed_password"])  # SQLite stores 0/1
        return Job(**data)

    def _event(self, row: Row) -> AuditEvent:
        row = dict(row)
        row["details"] = _json(row["details"])
        return AuditEvent(**row)


_JOB_FIELDS = [f for f in Job.__dataclass_fields__ if f not in ("state", "policy")]


def _api_key(row: Row) -> ApiKey:
    data = dict(row)
    data["scopes"] = tuple(s for s in str(data["scopes"]).split(",") if s)
    return ApiKey(**data)


def _policy(value: Any) -> JobPolicy:
    if isinstance(value, str):
        return _policy_from_text(value)
    return JobPolicy.from_dict(value)


@lru_cache(maxsize=256)
def _policy_from_text(text: str) -> JobPolicy:
    """Policies repeat across jobs; parsing is cached by their JSON text (they are immutable)."""
    return JobPolicy.from_dict(json.loads(text))


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
