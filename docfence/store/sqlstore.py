"""Store logic shared by both dialects: each transition is a named, fenced query plus its audit event,
in one transaction. Dialects supply connections, transactions and value conversion; never SQL logic."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from docfence.core.errors import (
    IdempotencyConflict,
    IllegalTransition,
    LeaseLost,
    NotFound,
    StaleAttempt,
)
from docfence.core.policy import JobPolicy
from docfence.core.records import (
    Artifact,
    ArtifactInfo,
    Attempt,
    AuditEvent,
    Claim,
    Completion,
    Job,
    NewJob,
)
from docfence.core.states import Event, JobState, transition
from docfence.store.ops import OperationsQueries
from docfence.store.reports import ReportQueries
from docfence.store.sqlbase import Row, Tx, _json
from docfence.store.wakeups import WakeupWaits
from docfence.store.webhooks import WebhookQueries

__all__ = ["Row", "SqlStore", "Submitted", "Tx"]

#: One item's answer from `submit_many`: (job, created), or the conflict that refused it.
Submitted = tuple[Job, bool] | IdempotencyConflict


def _insert_params(new: NewJob) -> dict[str, Any]:
    """The insert_job parameters of a submission (policy as JSON text; the clock is added by the caller)."""
    from docfence.core.ids import new_id

    policy = new.policy
    return {
        "id": new.job_id or new_id(), "tenant": new.tenant, "kind": policy.kind.value,
        "document_class": policy.document_class, "mode": policy.mode.value, "region": policy.region,
        "policy": _policy_text(policy), "max_attempts": policy.max_attempts,
        "lease_ttl_s": policy.lease_ttl_s, "retry_backoff_s": policy.retry_backoff_s,
        "deadline_s": policy.deadline_s, "retention_s": policy.retention_s,
        "idempotency_key": new.idempotency_key, "request_hash": new.request_hash,
        "input_key": new.input_key, "input_sha256": new.input_sha256, "input_bytes": new.input_bytes,
        "parent_job_id": new.parent_job_id, "report_request_id": new.report_request_id,
        "label": new.label, "filename": new.filename, "sealed_password": new.sealed_password,
    }


def _insert_order(item: dict[str, Any]) -> tuple[bool, str, str]:
    """The canonical order a batch's rows are inserted in: by idempotency key (keyless rows last). On
    PostgreSQL a row waits for a concurrent transaction that inserted the same key; two batches that
    take shared keys in one order cannot each hold a key the other waits for (no deadlock, 40P01).
    Equal keys keep the caller's order (the sort is stable), so the first of them is the one created."""
    key = item["idempotency_key"]
    return key is None, item["tenant"], key or ""


def _policy_text(policy: JobPolicy) -> str:
    """A policy's JSON text, cached: policies repeat across jobs (a batch shares one) and are
    immutable. A policy holding a mapping (a report's) cannot be hashed and is encoded each time."""
    try:
        return _cached_policy_text(policy)
    except TypeError:
        return json.dumps(policy.to_dict(), sort_keys=True)


@lru_cache(maxsize=256)
def _cached_policy_text(policy: JobPolicy) -> str:
    return json.dumps(policy.to_dict(), sort_keys=True)


def _submitted_details(job: Job) -> dict[str, Any]:
    """The submission event's details: policy facts and who the document is for (recipient, purpose,
    reference: a compliance reviewer asks who received it); never the label or filename."""
    return {"document_class": job.document_class, "mode": job.mode, "region": job.region,
            **job.policy.caller_fields()}


class SqlStore(OperationsQueries, ReportQueries, WebhookQueries, WakeupWaits):
    """The Store implementation over a dialect's `_tx()`; see store/base.py for the contract.

    Every transition that queues a job announces work, and every one that ends a job announces its
    end, in its own transaction (`Tx.announce_*`): waiters hear of committed transitions only."""

    # -- submit ----------------------------------------------------------------------------------
    def submit(self, new: NewJob) -> tuple[Job, bool]:
        """Create a queued job, or return the existing one for the same idempotency key and request.

        Raises IdempotencyConflict when the key was used for a different request; never a second job.
        """

        with self._tx() as tx:
            row = tx.one("insert_job", **_insert_params(new), now=self._now_param())
            if row is None:
                return self._existing_for_key(tx, new), False
            job = self._job(row)
            self._append_job_event(
                tx, row, Event.SUBMITTED, actor=new.actor, from_state=None, to_state=JobState.QUEUED,
                details=_submitted_details(job),
            )
            tx.announce_work()
        return job, True

    def submit_many(self, news: Sequence[NewJob], *, all_or_nothing: bool = True) -> list[Submitted]:
        """Create many queued jobs in ONE transaction (one insert statement, one batch of audit events).

        Answers, in the order of `news`: (job, created) per item; a replay of an earlier identical
        submission is (that job, False). An idempotency key used for a different request is an
        IdempotencyConflict: raised (and nothing committed) when `all_or_nothing`, else returned in
        that item's place while the other items commit.
        """
        if not news:
            return []
        items = [_insert_params(new) for new in news]
        ordered = sorted(items, key=_insert_order)  # answers below stay in the caller's order
        with self._tx() as tx:
            rows = {r["id"]: r for r in tx.all("insert_jobs_many", items=json.dumps(ordered),
                                               now=self._now_param())}
            out: list[Submitted] = []
            events = []
            for index, (new, item) in enumerate(zip(news, items, strict=True)):
                row = rows.get(item["id"])
                if row is not None:
                    job = self._job(row)
                    out.append((job, True))
                    events.append((row, self._job_event_fields(
                        row, Event.SUBMITTED, actor=new.actor, from_state=None, to_state=JobState.QUEUED,
                        details=_submitted_details(job))))
                    continue
                try:
                    out.append((self._existing_for_key(tx, new), False))
                except IdempotencyConflict as exc:
                    if all_or_nothing:
                        raise IdempotencyConflict(
                            f"item {index}: {exc.message} (the batch was refused whole; nothing was stored)",
                            field=f"items[{index}].idempotency_key") from None
                    out.append(exc)
            self._append_job_events(tx, events)
            if rows:
                tx.announce_work()
        return out

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
            tx.send("claim_plan")
            rows = tx.all("claim_jobs", worker=worker, limit=limit, now=self._now_param())
            return self._record_claims(tx, rows, worker)

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
        done = self.complete_many([Completion(job_id, attempt, artifact)], worker)
        if (job_id, attempt) not in done:
            raise StaleAttempt(f"job {job_id} attempt {attempt} is no longer current; discard its work")
        return done[(job_id, attempt)]

    def complete_many(self, completions: Sequence[Completion], worker: str) -> dict[tuple[str, int], Job]:
        """Fenced commits of several of `worker`'s attempts in one transaction (group commit).

        Each is fenced on its own row exactly as `complete` is. The answer holds the jobs that
        succeeded, keyed by (job id, attempt); a completion missing from it was stale, and nothing
        of it (job state, artifact row, audit event) was written.
        """
        if not completions:
            return {}
        by_key = {(c.job_id, c.attempt): c for c in completions}
        if len(by_key) != len(completions):
            raise ValueError("an attempt is listed twice in one group commit")
        transition(Event.ARTIFACT_COMMITTED, JobState.RENDERING)
        with self._tx() as tx:
            rows = tx.all("fence_commit_many", items=json.dumps([list(k) for k in by_key]), worker=worker,
                          now=self._now_param())
            done = [(row, by_key[(row["id"], int(row["attempt"]))].artifact) for row in rows]
            tx.send_many("insert_artifact", [
                {"job_id": row["id"], "attempt": row["attempt"], "storage_key": art.key, "sha256": art.sha256,
                 "bytes": art.bytes, "pages": art.pages, "created_at": row["updated_at"],
                 "validation": json.dumps(art.validation, sort_keys=True)}
                for row, art in done
            ])
            tx.send_many("end_attempt", [
                {"job_id": row["id"], "attempt": row["attempt"], "ended_at": row["updated_at"],
                 "outcome": Event.ARTIFACT_COMMITTED.value, "error_code": None}
                for row, _ in done
            ])
            self._append_job_events(tx, [(row, self._job_event_fields(
                row, Event.ARTIFACT_COMMITTED, actor=worker, from_state=JobState.RENDERING,
                to_state=JobState.SUCCEEDED,
                details={"sha256": art.sha256, "bytes": art.bytes, "pages": art.pages},
            )) for row, art in done])
            tx.announce_job_end([row["id"] for row in rows])
        return {(row["id"], int(row["attempt"])): self._job(row) for row in rows}

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
            if JobState(row["state"]).terminal:
                tx.announce_job_end([job_id])
            elif delay <= 0:  # a retry that waits out a back-off is found by the workers' safety poll
                tx.announce_work()
        return self._job(row)

    def release(self, job_id: str, attempt: int, worker: str) -> Job:
        """Hand a lease back early (graceful shutdown): the job is queued again at once."""
        with self._tx() as tx:
            row = self._fence(tx, job_id, attempt, worker, Event.LEASE_RELEASED, None, None)
            self._end_attempt(tx, row, Event.LEASE_RELEASED, None)
            self._append_job_event(tx, row, Event.LEASE_RELEASED, actor=worker,
                                   from_state=JobState.RENDERING, to_state=JobState.QUEUED)
            tx.announce_work()
        return self._job(row)

    def _fence(
        self, tx: Tx, job_id: str, attempt: int, worker: str, event: Event,
        code: str | None, message: str | None, *, delay_s: float = 0.0,
    ) -> Row:
        target = transition(event, JobState.RENDERING).target
        row = tx.one(
            "fence_finish", id=job_id, attempt=attempt, worker=worker, from_state="rendering",
            to_state=target.value, error_code=code, error_message=message, delay_s=delay_s,
            now=self._now_param(),
        )
        if row is None:
            raise StaleAttempt(f"job {job_id} attempt {attempt} is no longer current; discard its work")
        return row

    def _end_attempt(self, tx: Tx, row: Row, event: Event, code: str | None) -> None:
        tx.send("end_attempt", job_id=row["id"], attempt=row["attempt"], ended_at=row["updated_at"],
               outcome=event.value, error_code=code)

    # -- cancellation and maintenance --------------------------------------------------------------
    def cancel(self, job_id: str, *, actor: str, reason: str = "cancel_requested",
               note: str | None = None) -> Job:
        """Cancel a queued or rendering job; IllegalTransition when it is already terminal. `note`, the
        caller's free-text reason, is kept in the audit event's details."""
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
                                       from_state=job.state, to_state=JobState.CANCELED, reason_detail=reason,
                                       details=_noted({}, note))
                tx.announce_job_end([job_id])
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
            if any(not job.state.terminal for job in moved):
                tx.announce_work()
            tx.announce_job_end([job.id for job in moved if job.state.terminal])
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
            tx.announce_job_end([job.id for job in done])
        return done

    def _close_if_rendering(self, tx: Tx, row: Row, source: JobState, event: Event) -> None:
        if source is JobState.RENDERING:
            self._end_attempt(tx, row, event, row["last_error_code"])

    # -- deletion ---------------------------------------------------------------------------------
    def tombstone(self, job_id: str, *, actor: str, request_id: str | None, reason: str,
                  note: str | None = None) -> Job:
        """Mark a job's bytes deleted (cancelling it first when it is still active). The row, its
        attempts and audit trail stay. Idempotent. The caller deletes the bytes after this commits,
        so a stale attempt's late upload is always found by the reconciler's orphan collection."""
        job = self.get(job_id)
        if not job.state.terminal:
            with contextlib.suppress(IllegalTransition):  # it may have finished meanwhile
                self.cancel(job_id, actor=actor, reason="deletion_requested", note=note)
        with self._tx() as tx:
            row = tx.one("tombstone_job", id=job_id, request_id=request_id, now=self._now_param())
            if row is None:
                raise StaleAttempt(f"job {job_id} is still active; retry the deletion")
            tx.send("tombstone_artifact", job_id=job_id, deleted_at=row["deleted_at"])
            fields = {
                "job_id": job_id, "attempt": row["attempt"], "actor": actor, "action": "bytes_deletion",
                "from_state": row["state"], "to_state": row["state"], "reason": reason,
                "at": row["deleted_at"], "details": _noted({"request_id": request_id}, note),
            }
            self._insert_event(tx, job_id, row["audit_seq"], self._prev_hash(tx, job_id, row["audit_seq"]),
                               fields)
        return self._job(row)

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
        after: tuple[datetime, str] | None = None, created_after: datetime | None = None,
        label: str | None = None, filename: str | None = None,
    ) -> list[Job]:
        """Newest first. `after` is a keyset cursor, the (created_at, id) of the last job of the
        previous page: the next page starts strictly after it, stable under inserts. Creation range:
        `created_after` <= created_at < `created_before`; `label` and `filename` match exactly."""
        after_at, after_id = after if after else (None, None)
        with self._tx(write=False) as tx:
            rows = tx.all("list_jobs", state=state.value if state else None, tenant=tenant, mode=mode,
                          document_class=document_class, created_before=created_before, limit=limit,
                          after_at=after_at, after_id=after_id, created_after=created_after,
                          label=label, filename=filename)
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


def _noted(details: dict[str, Any], note: str | None) -> dict[str, Any]:
    """`details` with the caller's free-text reason under `note` (absent when none was given)."""
    return {**details, "note": note} if note else details
