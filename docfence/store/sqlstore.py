"""Store logic shared by both dialects: each transition is a named, fenced query plus its audit event,
in one transaction. Dialects supply connections, transactions and value conversion; never SQL logic."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol

from docfence.core.clock import Clock
from docfence.core.errors import (
    IdempotencyConflict,
    IllegalTransition,
    LeaseLost,
    NotFound,
    StaleAttempt,
)
from docfence.core.policy import JobPolicy
from docfence.core.records import (
    ApiKey,
    Artifact,
    ArtifactInfo,
    Attempt,
    AuditEvent,
    Claim,
    Job,
    NewJob,
)
from docfence.core.states import Event, JobState, transition
from docfence.store.audit import event_hash
from docfence.store.reports import ReportQueries

Row = dict[str, Any]


class Tx(Protocol):
    """One open transaction running named queries."""

    def one(self, name: str, **params: Any) -> Row | None: ...
    def all(self, name: str, **params: Any) -> list[Row]: ...
    def run(self, name: str, **params: Any) -> int: ...
    def send(self, name: str, **params: Any) -> None:
        """Run without waiting for the outcome (PostgreSQL pipelines it; errors surface at commit)."""


class SqlStore(ReportQueries):
    """The Store implementation over a dialect's `_tx()`; see store/base.py for the contract."""

    dialect = "sql"

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock

    # -- dialect hooks -------------------------------------------------------------------------
    def _tx(self, *, write: bool = True) -> AbstractContextManager[Tx]:
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

    # -- submit ----------------------------------------------------------------------------------
    def submit(self, new: NewJob) -> tuple[Job, bool]:
        """Create a queued job, or return the existing one for the same idempotency key and request.

        Raises IdempotencyConflict when the key was used for a different request; never a second job.
        """
        from docfence.core.ids import new_id

        policy = new.policy
        params = {
            "id": new.job_id or new_id(), "tenant": new.tenant, "kind": policy.kind.value,
            "document_class": policy.document_class, "mode": policy.mode.value, "region": policy.region,
            "policy": json.dumps(policy.to_dict(), sort_keys=True), "max_attempts": policy.max_attempts,
            "lease_ttl_s": policy.lease_ttl_s, "retry_backoff_s": policy.retry_backoff_s,
            "deadline_s": policy.deadline_s, "retention_s": policy.retention_s,
            "idempotency_key": new.idempotency_key, "request_hash": new.request_hash,
            "input_key": new.input_key, "input_sha256": new.input_sha256, "input_bytes": new.input_bytes,
            "parent_job_id": new.parent_job_id, "report_request_id": new.report_request_id,
            "now": self._now_param(),
        }
        with self._tx() as tx:
            row = tx.one("insert_job", **params)
            if row is None:
                return self._existing_for_key(tx, new), False
            job = self._job(row)
            self._append_job_event(
                tx, row, Event.SUBMITTED, actor=new.actor, from_state=None, to_state=JobState.QUEUED,
                details={"document_class": job.document_class, "mode": job.mode, "region": job.region},
            )
            tx.send("notify_queued")
        return job, True

    def _existing_for_key(self, tx: Tx, new: NewJob) -> Job:
        if new.idempotency_key is None:
            raise IdempotencyConflict("job id already exists")
        row = tx.one("find_by_idempotency", tenant=new.tenant, idempotency_key=new.idempotency_key)
        if row is None:  # the conflicting row vanished: only possible for a reused explicit id
            raise IdempotencyConflict()
        job = self._job(row)
        if job.request_hash != new.request_hash:
            raise IdempotencyConflict()
        return job

    # -- claim and heartbeat -------------------------------------------------------------------
    def claim(self, worker: str, *, limit: int = 1) -> list[Claim]:
        """Lease up to `limit` due jobs for `worker` (attempt += 1, lease from the store's clock)."""
        transition(Event.LEASE_ACQUIRED, JobState.QUEUED)
        with self._tx() as tx:
            rows = tx.all("claim_jobs", worker=worker, limit=limit, now=self._now_param())
            claims = []
            for row in rows:
                tx.send("insert_attempt", job_id=row["id"], attempt=row["attempt"], worker=worker,
                       claimed_at=row["claimed_at"])
                self._append_job_event(
                    tx, row, Event.LEASE_ACQUIRED, actor=worker, from_state=JobState.QUEUED,
                    to_state=JobState.RENDERING, details={"lease_expires_at": _iso(row["lease_expires_at"])},
                )
                job = self._job(row)
                claims.append(Claim(job, job.attempt, worker, row["lease_expires_at"]))
        return claims

    def heartbeat(self, job_id: str, attempt: int, worker: str) -> datetime:
        """Extend the lease; raises LeaseLost when id, attempt, state or owner no longer match."""
        with self._tx() as tx:
            row = tx.one("heartbeat", id=job_id, attempt=attempt, worker=worker, now=self._now_param())
        if row is None:
            raise LeaseLost(f"lease on job {job_id} attempt {attempt} is lost")
        expires: datetime = row["lease_expires_at"]
        return expires

    def heartbeat_many(
        self, leases: Sequence[tuple[str, int]], worker: str
    ) -> dict[tuple[str, int], datetime]:
        """Extend all of a worker's leases in one transaction; a lease missing from the answer is lost."""
        if not leases:
            return {}
        with self._tx() as tx:
            rows = tx.all("heartbeat_many", leases=json.dumps([list(lease) for lease in leases]),
                          worker=worker, now=self._now_param())
        return {(r["id"], int(r["attempt"])): r["lease_expires_at"] for r in rows}

    # -- worker outcomes -----------------------------------------------------------------------
    def complete(self, job_id: str, attempt: int, worker: str, artifact: ArtifactInfo) -> Job:
        """Fenced commit: succeeded with the artifact, or StaleAttempt and nothing is published."""
        with self._tx() as tx:
            row = self._fence(tx, job_id, attempt, worker, Event.ARTIFACT_COMMITTED, None, None)
            tx.send("insert_artifact", job_id=job_id, attempt=attempt, storage_key=artifact.key,
                   sha256=artifact.sha256, bytes=artifact.bytes, pages=artifact.pages,
                   validation=json.dumps(artifact.validation, sort_keys=True), created_at=row["updated_at"])
            self._end_attempt(tx, row, Event.ARTIFACT_COMMITTED, None)
            self._append_job_event(
                tx, row, Event.ARTIFACT_COMMITTED, actor=worker, from_state=JobState.RENDERING,
                to_state=JobState.SUCCEEDED,
                details={"sha256": artifact.sha256, "bytes": artifact.bytes, "pages": artifact.pages},
            )
        return self._job(row)

    def fail(
        self, job_id: str, attempt: int, worker: str, code: str, message: str, *, retryable: bool
    ) -> Job:
        """Permanent error -> failed; retryable -> queued with backoff while attempts remain."""
        with self._tx() as tx:
            current = tx.one("get_job", id=job_id)
            exhausted = current is not None and current["attempt"] >= current["max_attempts"]
            if retryable and not exhausted:
                event = Event.RETRYABLE_ERROR
            else:
                event = Event.RETRIES_EXHAUSTED if retryable else Event.PERMANENT_ERROR
            delay = 0.0
            if current is not None and event is Event.RETRYABLE_ERROR:
                delay = float(current["retry_backoff_s"]) * (2 ** max(0, attempt - 1))
            row = self._fence(tx, job_id, attempt, worker, event, code, message[:500], delay_s=delay)
            self._end_attempt(tx, row, event, code)
            self._append_job_event(
                tx, row, event, actor=worker, from_state=JobState.RENDERING,
                to_state=JobState(row["state"]), reason_detail=code,
            )
        return self._job(row)

    def release(self, job_id: str, attempt: int, worker: str) -> Job:
        """Hand a lease back early (graceful shutdown): the job is queued again at once."""
        with self._tx() as tx:
            row = self._fence(tx, job_id, attempt, worker, Event.LEASE_RELEASED, None, None)
            self._end_attempt(tx, row, Event.LEASE_RELEASED, None)
            self._append_job_event(tx, row, Event.LEASE_RELEASED, actor=worker,
                                   from_state=JobState.RENDERING, to_state=JobState.QUEUED)
            tx.send("notify_queued")
        return self._job(row)

    def _fence(
        self, tx: Tx, job_id: str, attempt: int, worker: str, event: Event,
        code: str | None, message: str | None, *, delay_s: float = 0.0,
    ) -> Row:
        target = transition(event, JobState.RENDERING).target
        row = tx.one(
            "fence_finish", id=job_id, attempt=attempt, worker=worker, from_state="rendering",
            to_state=target.value, error_code=code, error_message=message, delay_s=delay_s,
            require_lease=True, now=self._now_param(),
        )
        if row is None:
            raise StaleAttempt(f"job {job_id} attempt {attempt} is no longer current; discard its work")
        return row

    def _end_attempt(self, tx: Tx, row: Row, event: Event, code: str | None) -> None:
        tx.send("end_attempt", job_id=row["id"], attempt=row["attempt"], ended_at=row["updated_at"],
               outcome=event.value, error_code=code)

    # -- cancellation and maintenance --------------------------------------------------------------
    def cancel(self, job_id: str, *, actor: str, reason: str = "cancel_requested") -> Job:
        """Cancel a queued or rendering job; IllegalTransition when it is already terminal."""
        for _ in range(5):  # the job may move under us (claimed, requeued); re-read and fence again
            job = self.get(job_id)
            transition(Event.CANCEL_REQUESTED, job.state)
            with self._tx() as tx:
                row = tx.one("fence_cancel", id=job_id, from_state=job.state.value, attempt=job.attempt,
                             error_code="canceled", error_message="cancel requested",
                             require_deadline=False, now=self._now_param())
                if row is None:
                    continue
                self._close_if_rendering(tx, row, job.state, Event.CANCEL_REQUESTED)
                self._append_job_event(tx, row, Event.CANCEL_REQUESTED, actor=actor,
                                       from_state=job.state, to_state=JobState.CANCELED, reason_detail=reason)
            return self._job(row)
        raise StaleAttempt(f"job {job_id} kept changing; cancel again")

    def requeue_expired(self, *, batch: int = 100) -> list[Job]:
        """Requeue jobs whose lease expired (failed when out of attempts). Never a valid lease."""
        moved: list[Job] = []
        with self._tx() as tx:
            for cand in tx.all("select_expired_leases", limit=batch, now=self._now_param()):
                exhausted = cand["attempt"] >= cand["max_attempts"]
                event = Event.LEASE_EXPIRED_EXHAUSTED if exhausted else Event.LEASE_EXPIRED
                target = transition(event, JobState.RENDERING).target
                row = tx.one("fence_expired", id=cand["id"], attempt=cand["attempt"], to_state=target.value,
                             error_code="lease_expired" if exhausted else None,
                             error_message="lease expired and attempts are exhausted" if exhausted else None,
                             now=self._now_param())
                if row is None:
                    continue
                self._end_attempt(tx, row, event, "lease_expired")
                self._append_job_event(tx, row, event, actor="reconciler", from_state=JobState.RENDERING,
                                       to_state=target)
                moved.append(self._job(row))
            if moved:
                tx.send("notify_queued")
        return moved

    def cancel_past_deadline(self, *, batch: int = 100) -> list[Job]:
        """Cancel non-terminal jobs whose deadline has passed, in one bounded batch."""
        done: list[Job] = []
        with self._tx() as tx:
            for cand in tx.all("select_past_deadline", limit=batch, now=self._now_param()):
                source = JobState(cand["state"])
                transition(Event.DEADLINE_REACHED, source)
                row = tx.one("fence_cancel", id=cand["id"], from_state=source.value, attempt=cand["attempt"],
                             error_code="deadline_exceeded", error_message="the job's deadline passed",
                             require_deadline=True, now=self._now_param())
                if row is None:
                    continue
                self._close_if_rendering(tx, row, source, Event.DEADLINE_REACHED)
                self._append_job_event(tx, row, Event.DEADLINE_REACHED, actor="reconciler",
                                       from_state=source, to_state=JobState.CANCELED)
                done.append(self._job(row))
        return done

    def _close_if_rendering(self, tx: Tx, row: Row, source: JobState, event: Event) -> None:
        if source is JobState.RENDERING:
            self._end_attempt(tx, row, event, row["last_error_code"])

    # -- reads -----------------------------------------------------------------------------------
    def get(self, job_id: str) -> Job:
        with self._tx(write=False) as tx:
            row = tx.one("get_job", id=job_id)
        if row is None:
            raise NotFound(f"no job {job_id}")
        return self._job(row)

    def list_jobs(
        self, *, state: JobState | None = None, tenant: str | None = None, mode: str | None = None,
        document_class: str | None = None, created_before: datetime | None = None, limit: int = 100,
    ) -> list[Job]:
        with self._tx(write=False) as tx:
            rows = tx.all("list_jobs", state=state.value if state else None, tenant=tenant, mode=mode,
                          document_class=document_class, created_before=created_before, limit=limit)
        return [self._job(r) for r in rows]

    def count_by_state(self) -> dict[str, int]:
        counts = {s.value: 0 for s in JobState}
        with self._tx(write=False) as tx:
            for row in tx.all("count_by_state"):
                counts[row["state"]] = int(row["n"])
        return counts

    def attempts(self, job_id: str) -> list[Attempt]:
        with self._tx(write=False) as tx:
            rows = tx.all("list_attempts", job_id=job_id)
        return [Attempt(**r) for r in rows]

    def artifact(self, job_id: str) -> Artifact | None:
        with self._tx(write=False) as tx:
            row = tx.one("get_artifact", job_id=job_id)
        if row is None:
            return None
        row["key"] = row.pop("storage_key")
        row["validation"] = _json(row["validation"])
        return Artifact(**row)

    def audit_events(self, job_id: str) -> list[AuditEvent]:
        with self._tx(write=False) as tx:
            return [self._event(r) for r in tx.all("list_audit_for_job", job_id=job_id)]

    def audit_trail(self, *, after_seq: int = 0, limit: int = 1000) -> list[AuditEvent]:
        with self._tx(write=False) as tx:
            return [self._event(r) for r in tx.all("list_audit", after_seq=after_seq, limit=limit)]

    def iter_audit(self, *, page: int = 1000) -> Iterator[AuditEvent]:
        after = 0
        while True:
            events = self.audit_trail(after_seq=after, limit=page)
            yield from events
            if len(events) < page:
                return
            after = events[-1].seq

    def audit_heads(self) -> dict[str, tuple[int, str]]:
        with self._tx(write=False) as tx:
            return {r["chain"]: (int(r["seq"]), r["hash"]) for r in tx.all("list_chain_heads")}

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

    def _append_job_event(
        self, tx: Tx, row: Row, event: Event, *, actor: str, from_state: JobState | None,
        to_state: JobState, details: dict[str, Any] | None = None, reason_detail: str | None = None,
    ) -> None:
        transition(event, from_state)  # the table is the authority: refuse anything not in it
        if transition(event, from_state).target is not to_state:
            raise IllegalTransition(f"{event.value} does not lead to {to_state.value}")
        fields = {
            "job_id": row["id"], "attempt": row["attempt"], "actor": actor, "action": event.value,
            "from_state": from_state.value if from_state else None, "to_state": to_state.value,
            "reason": reason_detail or event.value, "at": row["updated_at"], "details": details or {},
        }
        self._insert_event(tx, row["id"], row["audit_seq"], self._prev_hash(tx, row["id"], row["audit_seq"]),
                           fields)

    def _prev_hash(self, tx: Tx, chain: str, seq: int) -> str:
        """The previous event's hash of a job chain (the job row lock serialises the chain)."""
        if seq <= 1:
            return ""
        row = tx.one("prev_audit_hash", chain=chain, seq=seq - 1)
        return str(row["hash"]) if row else ""

    def _insert_event(self, tx: Tx, chain: str, seq: int, prev: str, fields: dict[str, Any]) -> str:
        digest = event_hash(prev, chain, seq, fields)
        params = dict(fields, details=json.dumps(fields["details"], sort_keys=True))
        tx.send("insert_audit", chain=chain, chain_seq=seq, prev_hash=prev, hash=digest, **params)
        return digest

    def pause_claims(self, scope: str, *, actor: str, reason: str | None = None) -> None:
        with self._tx() as tx:
            if tx.run("insert_pause", scope=scope, actor=actor, reason=reason, now=self._now_param()):
                self._append_event(tx, "claims_paused", actor=actor, job_id=None, reason=reason,
                                   details={"scope": scope}, chain="operations")

    def resume_claims(self, scope: str, *, actor: str) -> None:
        with self._tx() as tx:
            if tx.run("delete_pause", scope=scope):
                self._append_event(tx, "claims_resumed", actor=actor, job_id=None, reason=None,
                                   details={"scope": scope}, chain="operations")
            tx.send("notify_queued")

    def paused_scopes(self) -> list[str]:
        with self._tx(write=False) as tx:
            return [r["scope"] for r in tx.all("list_pauses")]

    def valid_lease_count(self, *, mode: str | None = None) -> int:
        with self._tx(write=False) as tx:
            row = tx.one("count_valid_leases", mode=mode, now=self._now_param())
        return int(row["n"]) if row else 0

    def set_class_mode(self, document_class: str, mode: str, *, actor: str) -> None:
        with self._tx() as tx:
            tx.run("set_class_mode", document_class=document_class, mode=mode, actor=actor,
                   now=self._now_param())
            self._append_event(tx, "class_mode_changed", actor=actor, job_id=None, reason=None,
                               details={"document_class": document_class, "mode": mode},
                               chain="operations")

    def class_modes(self) -> dict[str, str]:
        with self._tx(write=False) as tx:
            return {r["document_class"]: r["mode"] for r in tx.all("list_class_modes")}

    # -- API keys ------------------------------------------------------------------------------------
    def insert_api_key(
        self, key_id: str, *, tenant: str, name: str, scopes: tuple[str, ...], key_hash: str, actor: str
    ) -> ApiKey:
        with self._tx() as tx:
            row = tx.one("insert_api_key", id=key_id, tenant=tenant, key_name=name, scopes=",".join(scopes),
                         key_hash=key_hash, now=self._now_param())
            assert row is not None
            self._append_event(tx, "api_key_created", actor=actor, job_id=None, reason=None,
                               details={"key_id": key_id, "tenant": tenant, "scopes": list(scopes)},
                               chain="operations")
        return _api_key(row)

    def get_api_key(self, key_id: str) -> ApiKey | None:
        with self._tx(write=False) as tx:
            row = tx.one("get_api_key", id=key_id)
        return _api_key(row) if row else None

    def revoke_api_key(self, key_id: str, *, actor: str) -> ApiKey:
        with self._tx() as tx:
            row = tx.one("revoke_api_key", id=key_id, now=self._now_param())
            if row is None:
                raise NotFound(f"no API key {key_id}")
            self._append_event(tx, "api_key_revoked", actor=actor, job_id=None, reason=None,
                               details={"key_id": key_id}, chain="operations")
        return _api_key(row)

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        with self._tx(write=False) as tx:
            return [_api_key(r) for r in tx.all("list_api_keys", tenant=tenant)]

    # -- deletion and retention --------------------------------------------------------------------
    def tombstone(self, job_id: str, *, actor: str, request_id: str | None, reason: str) -> Job:
        """Mark a job's bytes deleted (cancelling it first when it is still active). The row, its
        attempts and audit trail stay. Idempotent. The caller deletes the bytes after this commits,
        so a stale attempt's late upload is always found by the sweep."""
        job = self.get(job_id)
        if not job.state.terminal:
            with contextlib.suppress(IllegalTransition):  # it may have finished meanwhile
                self.cancel(job_id, actor=actor, reason="deletion_requested")
        with self._tx() as tx:
            row = tx.one("tombstone_job", id=job_id, request_id=request_id, now=self._now_param())
            if row is None:
                raise StaleAttempt(f"job {job_id} is still active; retry the deletion")
            tx.send("tombstone_artifact", job_id=job_id, deleted_at=row["deleted_at"])
            fields = {
                "job_id": job_id, "attempt": row["attempt"], "actor": actor, "action": "bytes_deletion",
                "from_state": row["state"], "to_state": row["state"], "reason": reason,
                "at": row["deleted_at"], "details": {"request_id": request_id},
            }
            self._insert_event(tx, job_id, row["audit_seq"], self._prev_hash(tx, job_id, row["audit_seq"]),
                               fields)
        return self._job(row)

    def retention_due(self, *, batch: int = 100) -> list[str]:
        with self._tx(write=False) as tx:
            return [r["id"] for r in tx.all("select_retention_due", limit=batch, now=self._now_param())]

    def deleted_since(self, since: datetime, *, limit: int = 1000) -> list[tuple[str, str, str]]:
        with self._tx(write=False) as tx:
            rows = tx.all("select_deleted_since", since=since, limit=limit)
        return [(r["id"], r["tenant"], r["region"]) for r in rows]

    # -- benchmarks ------------------------------------------------------------------------------
    def bench_fill_finished(self, n: int) -> None:
        """Benchmarks only: add `n` finished jobs so claims run against a realistic backlog."""
        with self._tx() as tx:
            tx.run("bench_fill_finished", n=n, policy=json.dumps(JobPolicy().to_dict()))

    def bench_raw_cycle(self, worker: str) -> bool:
        """Benchmarks only: one bare claim and one bare fenced commit; False when nothing was queued."""
        with self._tx() as tx:
            row = tx.one("bench_raw_claim", worker=worker)
        if row is None:
            return False
        with self._tx() as tx:
            if tx.run("bench_raw_commit", id=row["id"], attempt=row["attempt"]) != 1:
                raise StaleAttempt("raw commit lost its row")
        return True

    # -- row mapping -------------------------------------------------------------------------------
    def _job(self, row: Row) -> Job:
        data = {k: row[k] for k in _JOB_FIELDS}
        data["state"] = JobState(row["state"])
        data["policy"] = _policy(row["policy"])
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
