"""The job transitions shared by both dialects: each applies one row of core's TRANSITIONS through the
query the row names, with its audit event, in one transaction. SqlStore, the class both dialects
subclass, gathers these with the read and record mixins; dialects supply connections, transactions
and value conversion, never SQL logic."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from docfence.core.errors import IdempotencyConflict, IllegalTransition, LeaseLost, StaleAttempt
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, Claim, Completion, Job, NewJob, key_fingerprint
from docfence.core.states import Event, JobState, Transition, transition
from docfence.store.data_keys import DataKeyQueries
from docfence.store.job_reads import JobReads
from docfence.store.ops import OperationsQueries
from docfence.store.passes import ReconcilePasses
from docfence.store.reports import ReportQueries
from docfence.store.sqlbase import Row, Tx, _iso
from docfence.store.wakeups import WakeupWaits
from docfence.store.webhooks import WebhookQueries

__all__ = ["Row", "SqlStore", "Submitted", "Tx"]

#: One item's answer from `submit_many`: (job, created), or the conflict that refused it.
Submitted = tuple[Job, bool] | IdempotencyConflict


def _insert_params(new: NewJob) -> dict[str, Any]:
    """The `submitted` parameters of one job (policy as JSON text; the clock is added by the caller)."""
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
        "data_key_provider": new.data_key_provider, "data_key_kek_id": new.data_key_kek_id,
        "data_key_wrapped": new.data_key_wrapped,
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


class SqlStore(JobReads, OperationsQueries, ReconcilePasses, ReportQueries, WebhookQueries, WakeupWaits,
               DataKeyQueries):
    """The Store implementation over a dialect's `_tx()`; see store/base.py for the contract.

    Each job transition runs the query its row of `TRANSITIONS` names (queries/<dialect>/
    transitions.sql) with that row's target, source and attempt bump, and writes the audit event the
    row describes, in one transaction. Every transition that queues a job announces work, and every
    one that ends a job announces its end, in its own transaction (`Tx.announce_*`): waiters hear of
    committed transitions only."""

    # -- submit (row SUBMITTED) ---------------------------------------------------------------------
    def submit(self, new: NewJob) -> tuple[Job, bool]:
        """Create a queued job, or return the existing one for the same idempotency key and request.

        Raises IdempotencyConflict when the key was used for a different request; never a second job.
        """
        (answer,) = self.submit_many([new], all_or_nothing=False)
        if isinstance(answer, IdempotencyConflict):
            raise answer
        return answer

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
        t = transition(Event.SUBMITTED, None)
        with self._tx() as tx:
            rows = {r["id"]: r for r in self._apply(tx, t, items=json.dumps(ordered))}
            out: list[Submitted] = []
            events = []
            for index, (new, item) in enumerate(zip(news, items, strict=True)):
                row = rows.get(item["id"])
                if row is not None:
                    job = self._job(row)
                    out.append((job, True))
                    events.append((row, _submitted_details(job), new.actor))
                    continue
                try:
                    out.append((self._existing_for_key(tx, new), False))
                except IdempotencyConflict as exc:
                    if all_or_nothing:
                        raise IdempotencyConflict(
                            f"item {index}: {exc.message} (the batch was refused whole; nothing was stored)",
                            field=f"items[{index}].idempotency_key") from None
                    out.append(exc)
            self._audit_transition(tx, t, events)
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

    # -- claim (row LEASE_ACQUIRED) and heartbeat ----------------------------------------------------
    def claim(self, worker: str, *, limit: int = 1) -> list[Claim]:
        """Lease up to `limit` due jobs for `worker` (attempt += 1, lease from the store's clock):
        watermark jobs and report jobs rendered here, never those an outside provider renders."""
        return self._acquire_leases(worker, limit, processors=None)

    def claim_provider_jobs(self, worker: str, processors: Sequence[str], *, limit: int = 1) -> list[Claim]:
        """Lease queued report jobs whose processor is in `processors`; the same fenced claim as `claim`."""
        if not processors:
            return []
        return self._acquire_leases(worker, limit, processors=json.dumps(list(processors)))

    def _acquire_leases(self, worker: str, limit: int, *, processors: str | None) -> list[Claim]:
        """Row LEASE_ACQUIRED for one kind of work; with each lease, its attempt row and audit event."""
        t = transition(Event.LEASE_ACQUIRED, JobState.QUEUED)
        with self._tx() as tx:
            tx.send("claim_plan")
            rows = self._apply(tx, t, worker=worker, limit=limit, processors=processors)
            tx.send_many("insert_attempt", [
                {"job_id": r["id"], "attempt": r["attempt"], "worker": worker, "claimed_at": r["claimed_at"]}
                for r in rows
            ])
            self._audit_transition(tx, t, [(r, {"lease_expires_at": _iso(r["lease_expires_at"])}, worker)
                                           for r in rows])
        return [Claim(job, job.attempt, worker, row["lease_expires_at"])
                for row in rows for job in (self._job(row),)]

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

    # -- worker outcomes ----------------------------------------------------------------------------
    def complete(self, job_id: str, attempt: int, worker: str, artifact: ArtifactInfo) -> Job:
        """Fenced commit (row ARTIFACT_COMMITTED): succeeded with the artifact, or StaleAttempt and
        nothing is published."""
        done = self.complete_many([Completion(job_id, attempt, artifact)], worker)
        if (job_id, attempt) not in done:
            raise StaleAttempt(f"job {job_id} attempt {attempt} is no longer current; discard its work")
        return done[(job_id, attempt)]

    def complete_many(self, completions: Sequence[Completion], worker: str) -> dict[tuple[str, int], Job]:
        """Fenced commits (row ARTIFACT_COMMITTED) of several of `worker`'s attempts in one transaction.

        Each is fenced on its own row exactly as `complete` is. The answer holds the jobs that
        succeeded, keyed by (job id, attempt); a completion missing from it was stale, and nothing
        of it (job state, artifact row, audit event) was written.
        """
        if not completions:
            return {}
        by_key = {(c.job_id, c.attempt): c for c in completions}
        if len(by_key) != len(completions):
            raise ValueError("an attempt is listed twice in one group commit")
        t = transition(Event.ARTIFACT_COMMITTED, JobState.RENDERING)
        with self._tx() as tx:
            rows = self._apply(tx, t, items=json.dumps([list(k) for k in by_key]), worker=worker)
            done = [(row, by_key[(row["id"], int(row["attempt"]))].artifact) for row in rows]
            tx.send_many("insert_artifact", [
                {"job_id": row["id"], "attempt": row["attempt"], "storage_key": art.key, "sha256": art.sha256,
                 "bytes": art.bytes, "pages": art.pages, "created_at": row["updated_at"],
                 "validation": json.dumps(art.validation, sort_keys=True)}
                for row, art in done
            ])
            tx.send_many("end_attempt", [
                {"job_id": row["id"], "attempt": row["attempt"], "ended_at": row["updated_at"],
                 "outcome": t.event.value, "error_code": None}
                for row, _ in done
            ])
            self._audit_transition(tx, t, [
                (row, {"sha256": art.sha256, "bytes": art.bytes, "pages": art.pages}, worker)
                for row, art in done])
            tx.announce_job_end([row["id"] for row in rows])
        return {(row["id"], int(row["attempt"])): self._job(row) for row in rows}

    def fail(
        self, job_id: str, attempt: int, worker: str, code: str, message: str, *, retryable: bool,
        validation: str | None = None,
    ) -> Job:
        """The worker's error ends its attempt, applying one of three rows: PERMANENT_ERROR (failed);
        RETRYABLE_ERROR (queued again after an exponential back-off) while attempts remain, else
        RETRIES_EXHAUSTED (failed). Raises StaleAttempt when the attempt is no longer current.
        `validation` (bounded JSON text) is kept on the attempt's row in the same transaction."""
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
            t = transition(event, JobState.RENDERING)
            row = self._fenced(tx, t, job_id, attempt, worker=worker, error_code=code,
                               error_message=message[:500], delay_s=delay)
            self._end_attempt(tx, row, event, code)
            if validation is not None:
                tx.send("attempt_validation_kept", job_id=job_id, attempt=attempt, validation=validation)
            self._audit_transition(tx, t, [(row, None, worker)], reason=code)
            if t.target.terminal:
                tx.announce_job_end([job_id])
            elif delay <= 0:  # a retry that waits out a back-off is found by the workers' safety poll
                tx.announce_work()
        return self._job(row)

    def release(self, job_id: str, attempt: int, worker: str) -> Job:
        """Hand a lease back early (row LEASE_RELEASED, graceful shutdown): queued again at once."""
        t = transition(Event.LEASE_RELEASED, JobState.RENDERING)
        with self._tx() as tx:
            row = self._fenced(tx, t, job_id, attempt, worker=worker)
            self._end_attempt(tx, row, t.event, None)
            self._audit_transition(tx, t, [(row, None, worker)])
            tx.announce_work()
        return self._job(row)

    def _fenced(self, tx: Tx, t: Transition, job_id: str, attempt: int, **params: Any) -> Row:
        """Row `t` for one job fenced on its id and attempt; raises StaleAttempt when nothing moved."""
        rows = self._apply(tx, t, id=job_id, attempt=attempt, **params)
        if not rows:
            raise StaleAttempt(f"job {job_id} attempt {attempt} is no longer current; discard its work")
        return rows[0]

    # -- cancellation and maintenance ---------------------------------------------------------------
    def cancel(self, job_id: str, *, actor: str, reason: str = "cancel_requested",
               note: str | None = None) -> Job:
        """Row CANCEL_REQUESTED from the job's current state; IllegalTransition when it is already
        terminal. `note`, the caller's free-text reason, is kept in the audit event's details."""
        for _ in range(5):  # the job may move under us (claimed, requeued); re-read and fence again
            job = self.get(job_id)
            t = transition(Event.CANCEL_REQUESTED, job.state)
            with self._tx() as tx:
                rows = self._apply(tx, t, id=job_id, attempt=job.attempt, error_code="canceled",
                                   error_message="cancel requested")
                if not rows:
                    continue
                self._close_if_rendering(tx, rows[0], t)
                self._audit_transition(tx, t, [(rows[0], _noted({}, note), actor)], reason=reason)
                tx.announce_job_end([job_id])
            return self._job(rows[0])
        raise StaleAttempt(f"job {job_id} kept changing; cancel again")

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
            self._append_events(tx, [(row, {
                "job_id": job_id, "attempt": row["attempt"], "actor": actor, "action": "bytes_deletion",
                "from_state": row["state"], "to_state": row["state"], "reason": reason,
                "at": row["deleted_at"], "details": _noted({"request_id": request_id, **_key_destroyed(row)},
                                                           note),
            })])
        return self._job(row)


def _key_destroyed(row: Row) -> dict[str, Any]:
    """The deletion event's evidence that the job's data key was destroyed (in the tombstone's own
    UPDATE): a fingerprint of the key-encryption key that had wrapped it, never the key."""
    if row["data_key_provider"] is None or row["data_key_destroyed_at"] is None:
        return {}
    return {"key_destroyed": True,
            "kek_fingerprint": key_fingerprint(row["data_key_provider"], row["data_key_kek_id"] or "")}


def _noted(details: dict[str, Any], note: str | None) -> dict[str, Any]:
    """`details` with the caller's free-text reason under `note` (absent when none was given)."""
    return {**details, "note": note} if note else details
