"""Wire models of the HTTP API (what the OpenAPI document publishes) and their builders from records."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from docfence.core.records import Attempt, AuditEvent
from docfence.service import JobDetail


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None  # the request field at fault (e.g. "deadline_s", "data.items[0].qty"), if known


class ErrorBody(BaseModel):
    """The one error shape of every non-2xx answer."""

    error: ErrorDetail


class ArtifactSummary(BaseModel):
    sha256: str
    bytes: int
    pages: int


class JobError(BaseModel):
    code: str
    message: str


class JobOut(BaseModel):
    id: str
    state: str
    terminal: bool
    kind: str
    document_class: str
    mode: str
    region: str
    attempt: int
    max_attempts: int
    deadline_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    deleted_at: datetime | None
    idempotency_key: str | None
    input_sha256: str | None
    input_bytes: int | None
    error: JobError | None
    artifact: ArtifactSummary | None
    verification_url: str | None = None  # what the document's QR code encodes, when its class has one


class EventOut(BaseModel):
    seq: int
    at: datetime
    attempt: int | None
    actor: str
    action: str
    from_state: str | None
    to_state: str | None
    reason: str | None
    details: dict[str, Any]


class AttemptOut(BaseModel):
    attempt: int
    worker: str
    claimed_at: datetime
    ended_at: datetime | None
    outcome: str | None
    error_code: str | None


class EventsOut(BaseModel):
    job_id: str
    events: list[EventOut]
    attempts: list[AttemptOut]


class ClassOut(BaseModel):
    name: str
    mode: str
    deadline_s: float
    max_deadline_s: float
    max_attempts: int


class CapabilitiesOut(BaseModel):
    modes: list[str]
    document_classes: list[ClassOut]
    default_class: str
    limits: dict[str, float]
    max_upload_bytes: int
    max_wait_s: float
    signed_url_ttl_s: float
    error_codes: dict[str, str]


class StatusOut(BaseModel):
    status: str


def job_out(detail: JobDetail) -> JobOut:
    job, artifact = detail.job, detail.artifact
    error = None
    if job.last_error_code:
        error = JobError(code=job.last_error_code, message=job.last_error_message or job.last_error_code)
    summary = None
    if artifact is not None and artifact.deleted_at is None:
        summary = ArtifactSummary(sha256=artifact.sha256, bytes=artifact.bytes, pages=artifact.pages)
    return JobOut(
        id=job.id, state=job.state.value, terminal=job.terminal, kind=job.kind,
        document_class=job.document_class, mode=job.mode, region=job.region, attempt=job.attempt,
        max_attempts=job.max_attempts, deadline_at=job.deadline_at, created_at=job.created_at,
        updated_at=job.updated_at, finished_at=job.finished_at, deleted_at=job.deleted_at,
        idempotency_key=job.idempotency_key, input_sha256=job.input_sha256, input_bytes=job.input_bytes,
        error=error, artifact=summary,
        verification_url=job.policy.verification.url if job.policy.verification is not None else None,
    )


def events_out(job_id: str, events: list[AuditEvent], attempts: list[Attempt]) -> EventsOut:
    return EventsOut(
        job_id=job_id,
        events=[
            EventOut(seq=e.chain_seq, at=e.at, attempt=e.attempt, actor=e.actor, action=e.action,
                     from_state=e.from_state, to_state=e.to_state, reason=e.reason, details=e.details)
            for e in events
        ],
        attempts=[
            AttemptOut(attempt=a.attempt, worker=a.worker, claimed_at=a.claimed_at, ended_at=a.ended_at,
                       outcome=a.outcome, error_code=a.error_code)
            for a in attempts
        ],
    )
