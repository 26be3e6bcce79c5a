"""Wire models of the HTTP API (what the OpenAPI document publishes) and their builders from records."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from docfence.core.marks import marks_view
from docfence.core.records import Attempt, AuditEvent, Job
from docfence.service import BatchOutcome, JobDetail


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


class MarkOut(BaseModel):
    kind: str  # text | image
    text: str | None  # the template as given (fields not filled); None for an image
    position: str
    pages: str
    layer: str
    opacity: float
    fields: list[str]


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
    label: str | None = None
    filename: str | None = None
    input_sha256: str | None
    input_bytes: int | None
    error: JobError | None
    artifact: ArtifactSummary | None
    marks: list[MarkOut] = []
    # field values frozen at submission; recipient, purpose and reference read "(hidden)" to keys
    # without the submit or admin scope
    fields: dict[str, str] = {}
    verification_url: str | None = None  # what the document's QR code encodes, when its class has one


class JobListOut(BaseModel):
    """One page of jobs, newest first; pass `next_cursor` as `cursor` for the next (null: last page)."""

    jobs: list[JobOut]
    next_cursor: str | None


class BatchItemIn(BaseModel):
    """One document's options in a batch (all optional; the batch-wide form fields fill the gaps)."""

    model_config = ConfigDict(extra="forbid")

    document_class: str | None = Field(default=None, max_length=64)
    mode: Literal["vector", "raster"] | None = None
    deadline_s: float | None = None
    watermark: dict[str, Any] | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    label: str | None = Field(default=None, max_length=200)
    password: str | None = Field(default=None, max_length=1024)
    marks: list[dict[str, Any]] | None = None
    recipient: str | None = Field(default=None, max_length=2000)
    purpose: str | None = Field(default=None, max_length=2000)
    reference: str | None = Field(default=None, max_length=2000)


class BatchItemOut(BaseModel):
    """`created`, `existing` (an earlier identical submission) or `refused` (with its error)."""

    index: int
    filename: str | None
    status: Literal["created", "existing", "refused"]
    job: JobOut | None
    error: ErrorDetail | None


class BatchOut(BaseModel):
    created: int
    existing: int
    refused: int
    items: list[BatchItemOut]


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
    view = marks_view(job.policy, recipient_visible=detail.recipient_visible)
    return JobOut(
        marks=[MarkOut(**m) for m in view["marks"]], fields=view["fields"],
        id=job.id, state=job.state.value, terminal=job.terminal, kind=job.kind,
        document_class=job.document_class, mode=job.mode, region=job.region, attempt=job.attempt,
        max_attempts=job.max_attempts, deadline_at=job.deadline_at, created_at=job.created_at,
        updated_at=job.updated_at, finished_at=job.finished_at, deleted_at=job.deleted_at,
        idempotency_key=job.idempotency_key, label=job.label, filename=job.filename,
        input_sha256=job.input_sha256, input_bytes=job.input_bytes,
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


def batch_out(outcomes: list[BatchOutcome], filenames: list[str | None],
              describe: Callable[[Job], JobDetail]) -> BatchOut:
    items = []
    for outcome in outcomes:
        error = None
        if outcome.error is not None:
            error = ErrorDetail(code=outcome.error.code, message=outcome.error.message,
                                field=outcome.error.field)
        job = job_out(describe(outcome.job)) if outcome.job is not None else None
        items.append(BatchItemOut(index=outcome.index, filename=filenames[outcome.index],
                                  status=outcome.status, job=job, error=error))
    count = {s: sum(1 for i in items if i.status == s) for s in ("created", "existing", "refused")}
    return BatchOut(items=items, **count)
