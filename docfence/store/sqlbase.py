"""What both SQL dialects share below the transitions: the transaction seam, applying one row of core's
transition table with its audit event, row mapping, and appending hash-chained audit events inside a
transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, Protocol

from docfence.core.clock import Clock
from docfence.core.errors import IllegalTransition, NotFound
from docfence.core.policy import JobPolicy
from docfence.core.records import ApiKey, AuditEvent, Job
from docfence.core.states import Event, JobState, Transition
from docfence.store.audit import event_hash
from docfence.store.outbox import append_outbox
from docfence.store.queries import migrations

Row = dict[str, Any]
Details = dict[str, Any] | None  # an audit event's details (None: none)


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

    def close_thread_connection(self) -> None:
        """Close the calling thread's connection, as a thread that ends should (each thread keeps its
        own); the store stays usable, and the thread's next call would open another."""
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

    def schema_versions(self) -> tuple[int, int]:
        """(applied, known): the newest migration applied to this database (0 before the first), and
        the newest migration file of this dialect this code ships. Raises StoreError when unreadable."""
        with self._tx(write=False) as tx:
            row = tx.one("schema_version")
        assert row is not None
        return int(row["version"]), _newest_migration(self.dialect)

    # -- applying a row of the table ------------------------------------------------------------
    def _apply(self, tx: Tx, t: Transition, **params: Any) -> list[Row]:
        """Run row `t`'s query with the row's answer; the rows it moved (none: stale, nothing moved)."""
        return tx.all(t.query, from_state=t.source.value if t.source else None, to_state=t.target.value,
                      attempt_bump=int(t.bumps_attempt), now=self._now_param(), **params)

    def _audit_transition(self, tx: Tx, t: Transition, moved: Sequence[tuple[Row, Details, str]], *,
                          reason: str | None = None) -> None:
        """Append row `t`'s audit event (action, from/to from the row) to each moved job's chain:
        `moved` holds (job row as the query returned it, the event's details, actor)."""
        events = []
        for row, details, actor in moved:
            if row["state"] != t.target.value:  # the query disagrees with its row of the table
                raise IllegalTransition(f"{t.query} moved job {row['id']} to {row['state']}, not {t.target}")
            events.append((row, {
                "job_id": row["id"], "attempt": row["attempt"], "actor": actor, "action": t.event.value,
                "from_state": t.source.value if t.source else None, "to_state": t.target.value,
                "reason": reason or t.event.value, "at": row["updated_at"], "details": details or {}}))
        self._append_events(tx, events)

    def _end_attempt(self, tx: Tx, row: Row, event: Event, code: str | None) -> None:
        tx.send("end_attempt", job_id=row["id"], attempt=row["attempt"], ended_at=row["updated_at"],
               outcome=event.value, error_code=code)

    def _close_if_rendering(self, tx: Tx, row: Row, t: Transition) -> None:
        if t.source is JobState.RENDERING:
            self._end_attempt(tx, row, t.event, row["last_error_code"])

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
        """One non-transition event: on the job's chain (its state unchanged) or on the named `chain`."""
        if job_id is not None:
            head = tx.one("bump_job_audit", id=job_id, now=self._now_param())
            if head is None:
                raise NotFound(f"no job {job_id}")
            attempt, state, at = head["attempt"], head["state"], head["now"]
        else:
            head = tx.one("lock_chain", chain=chain, now=self._now_param())
            seq = (head["seq"] or 0) + 1 if head and head["seq"] is not None else 1
            prev = head["hash"] if head and head["hash"] else ""
            at = head["now"] if head and head.get("now") else self._db_now(tx)
            attempt, state = None, None
            head = {"id": chain, "audit_seq": seq, "prev_hash": prev}
        fields = {"job_id": job_id, "attempt": attempt, "actor": actor, "action": action,
                  "from_state": state, "to_state": state, "reason": reason, "at": at, "details": details}
        ((chain, seq, prev, digest),) = self._append_events(tx, [(head, fields)])
        if job_id is None:
            tx.send("upsert_chain", chain=chain, seq=seq, hash=digest)
        return AuditEvent(seq=0, chain=chain, chain_seq=seq, prev_hash=prev, hash=digest, **fields)

    def _db_now(self, tx: Tx) -> datetime:
        row = tx.one("store_now", now=self._now_param())
        assert row is not None
        now: datetime = row["now"]
        return now

    def _append_events(
        self, tx: Tx, events: Sequence[tuple[Row, dict[str, Any]]]
    ) -> list[tuple[str, int, str, str]]:
        """The one way an audit event is written: each (head, fields) appends `fields` as event number
        head["audit_seq"] of chain head["id"] (a job id, or a named chain), whose position the caller
        has just taken under a lock (a job row's update, `lock_chain`). The previous hash comes with
        the head ("prev_hash") or from one query for all; the events are written as one batch, and the
        terminal transitions among them write their webhook outbox rows in this same transaction.
        Answers (chain, seq, prev_hash, hash) per event."""
        # Transitions that return `prev_hash` read it in their own statement. On PostgreSQL that
        # statement's snapshot can predate an event committed just before it locked the row (the
        # row's newest version is locked, the event is not visible): NULL then, and the hash is
        # looked up again by a later statement, which sees it.
        links = [(head["id"], head["audit_seq"] - 1) for head, _ in events
                 if head["audit_seq"] > 1 and head.get("prev_hash") is None]
        prev: dict[tuple[str, int], str] = {}
        if links:
            for r in tx.all("prev_audit_hashes", links=json.dumps(links)):
                if r["hash"] is not None:
                    prev[(r["chain"], int(r["chain_seq"]))] = str(r["hash"])
        batch, written = [], []
        for head, fields in events:
            chain, seq = head["id"], head["audit_seq"]
            prev_hash = head.get("prev_hash") or prev.get((chain, seq - 1), "")
            params = dict(fields, details=json.dumps(fields["details"], sort_keys=True), chain=chain,
                          chain_seq=seq, prev_hash=prev_hash, hash=event_hash(prev_hash, chain, seq, fields))
            batch.append(params)
            written.append((chain, seq, prev_hash, params["hash"]))
        tx.send_many("insert_audit", batch)
        # a transition changes the state; a note on a job (download, deletion) keeps it
        append_outbox(tx, [(head, f) for head, f in events if f["from_state"] != f["to_state"]])
        return written

    # -- row mapping -------------------------------------------------------------------------------
    def _job(self, row: Row) -> Job:
        data = {k: row[k] for k in _JOB_FIELDS}
        data["state"] = JobState(row["state"])
        data["policy"] = _policy(row["policy"])
        data["sealed_password"] = bool(data["sealed_password"])  # SQLite stores 0/1
        return Job(**data)

    def _event(self, row: Row) -> AuditEvent:
        data = known_fields(AuditEvent, row)
        data["details"] = _json(row["details"])
        return AuditEvent(**data)


_JOB_FIELDS = [f for f in Job.__dataclass_fields__ if f not in ("state", "policy")]


def known_fields(cls: type[Any], row: Row) -> dict[str, Any]:
    """The row's values of the record's fields, and only those: a column a newer release added is
    ignored, so this version keeps reading every row during a rolling upgrade and after a rollback
    (docs/deploy.md, schema compatibility). Never build a record from a whole `SELECT *` row."""
    return {name: row[name] for name in cls.__dataclass_fields__}


def _api_key(row: Row) -> ApiKey:
    data = known_fields(ApiKey, row)
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


@cache
def _newest_migration(dialect: str) -> int:
    """The number of the newest migration file of `dialect` (0 when it has none)."""
    return max((number for number, _, _ in migrations(dialect)), default=0)
