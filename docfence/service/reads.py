"""Reading jobs: one job, a page of a tenant's jobs, a job's timeline and attempts, and the wake-up
a long-poll waits on; another tenant's job is indistinguishable from a missing one."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from docfence.core.access import Principal, check_tenant
from docfence.core.errors import DocfenceError, InvalidRequest
from docfence.core.fields import CALLER_FIELDS
from docfence.core.marks import HIDDEN
from docfence.core.records import Artifact, Attempt, AuditEvent, Job, failed_validation
from docfence.core.states import JobState
from docfence.intake import MAX_LIST_LIMIT, JobQuery, decode_cursor, encode_cursor
from docfence.service.base import ServiceState
from docfence.store.wakeups import JobEndWatch

#: Actors that name a process (worker host and pid): anything but a key reference that holds a digit.
_PROCESS_ACTOR_RE = re.compile(r"(?!key:).*[0-9].*")


@dataclass(frozen=True)
class JobDetail:
    """A job as its caller may see it: with its artifact record once succeeded."""

    job: Job
    artifact: Artifact | None
    recipient_visible: bool = False  # the caller may see the marks' recipient, purpose and reference
    # a job that failed validation: its newest attempt's kept report (core.records.failed_validation)
    failed_validation: dict[str, Any] | None = None


@dataclass(frozen=True)
class Readiness:
    """The readiness answer: `reason` says why not when the store answers but cannot serve this code."""

    ready: bool
    reason: str | None = None


def schema_current(applied: int, known: int) -> bool:
    """Every migration this code ships is applied (`applied` is the newest applied, `known` the newest
    this code ships). A database ahead of the code is current too: a newer release migrated it, and
    expand-then-contract (docs/deploy.md) promises that the previous release runs against it, so old
    servers stay in the load balancer while a rolling upgrade replaces them."""
    return applied >= known


class Reads(ServiceState):
    """get, list_jobs, events, watch_job_end: what a caller may see of its jobs."""

    def get(self, principal: Principal, job_id: str) -> JobDetail:
        principal.require("jobs.read")
        return self.describe(self._visible(principal, job_id), principal)

    def get_submitted(self, principal: Principal, job_id: str) -> JobDetail:
        """The job this caller just submitted, re-read while `POST /v1/jobs?wait=` waits: a submit-only
        key may see what it submitted (as the submit answer shows it), not other jobs (`get`)."""
        principal.require("jobs.submit")
        return self.describe(self._visible(principal, job_id), principal)

    def list_jobs(self, principal: Principal, query: JobQuery) -> tuple[list[JobDetail], str | None]:
        """The key's tenant's jobs under the filters, newest first (created_at, then id), `limit` per
        page, and the cursor of the next page (None on the last). Stable under concurrent inserts."""
        principal.require("jobs.read")
        if not 1 <= query.limit <= MAX_LIST_LIMIT:
            raise InvalidRequest(f"limit must be in [1, {MAX_LIST_LIMIT}]", field="limit")
        jobs = self.store.list_jobs(
            tenant=check_tenant(principal.tenant), state=JobState(query.state) if query.state else None,
            mode=query.mode, document_class=query.document_class, created_after=query.created_after,
            created_before=query.created_before, label=query.label, filename=query.filename,
            limit=query.limit, after=decode_cursor(query.cursor) if query.cursor else None)
        nxt = encode_cursor(jobs[-1]) if len(jobs) == query.limit else None
        return [self.describe(job, principal) for job in jobs], nxt

    def describe(self, job: Job, principal: Principal | None = None) -> JobDetail:
        """The job with its artifact record once succeeded (the caller already may see the job); the
        marks' recipient only when `principal` may see it (core/access.py: jobs.recipient)."""
        artifact = self.store.artifact(job.id) if job.state is JobState.SUCCEEDED else None
        visible = principal is not None and principal.allows("jobs.recipient")
        failed = None
        if job.last_error_code == "validation_failed":  # only these jobs pay for reading attempts
            failed = failed_validation(self.store.attempts(job.id))
        return JobDetail(job, artifact, visible, failed)

    def watch_job_end(self, job_id: str, *, on_wake: Callable[[], None] | None = None) -> JobEndWatch:
        """A subscription to the announcement that `job_id` ended, for long-polls (close it when done).

        Start it before reading the job, then re-read with `get` (which also checks the caller may
        see the job) whenever it wakes: wakes are hints, sent only for committed transitions, and
        reveal nothing by themselves. `on_wake` runs in the store's listener thread: keep it instant.
        """
        return self.store.watch_job_end((job_id,), on_wake=on_wake)

    def events(self, principal: Principal, job_id: str) -> tuple[list[AuditEvent], list[Attempt]]:
        """The job's timeline and attempts; worker hosts and pids appear only to operators (others see
        a stable alias per worker, so attempts can still be told apart)."""
        principal.require("jobs.read")
        job = self._visible(principal, job_id)
        events, attempts = self.store.audit_events(job.id), self.store.attempts(job.id)
        if not principal.allows("jobs.recipient"):
            events = [replace(e, details={k: HIDDEN if k in CALLER_FIELDS else v
                                          for k, v in e.details.items()}) for e in events]
        if principal.allows("ops.workers"):
            return events, attempts
        return ([replace(e, actor=self.worker_alias(e.actor)) for e in events],
                [replace(a, worker=self.worker_alias(a.worker)) for a in attempts])

    def worker_alias(self, actor: str) -> str:
        """`actor` unless it names a process (host and pid): then `worker-<10 hex>`, keyed by the signing
        secret so the alias cannot be reversed by guessing hosts and pids."""
        if actor is None or not _PROCESS_ACTOR_RE.fullmatch(actor):
            return actor
        return "worker-" + hmac.new(self._secret, actor.encode(), hashlib.sha256).hexdigest()[:10]

    def store_ready(self) -> bool:
        """Whether this process may take traffic (`readiness()`)."""
        return self.readiness().ready

    def readiness(self) -> Readiness:
        """Ready when the store answers and its schema is current for this code (`schema_current`);
        otherwise why not. Reads only; it never migrates."""
        try:
            self.store.now()
            applied, known = self.store.schema_versions()
        except DocfenceError:
            return Readiness(False)
        if not schema_current(applied, known):
            return Readiness(False, f"database schema is at migration {applied}, this version needs "
                                    f"{known}: run 'docfence db upgrade'")
        return Readiness(True)
