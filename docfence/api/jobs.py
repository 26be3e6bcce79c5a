"""Job routes: submit (one, or a batch in one transaction; optionally waiting for the end), list with
filters and a cursor, status (with a bounded long-poll), cancel, events and the artifact redirect."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, File, Form, Header, Path, Query, Request, Response, UploadFile
from fastapi.responses import RedirectResponse
from pydantic import AwareDatetime, TypeAdapter, ValidationError, WithJsonSchema
from pydantic.json_schema import SkipJsonSchema
from starlette.concurrency import run_in_threadpool

from docfence.api.deps import JobsCancel, JobsDelete, JobsRead, JobsSubmit, ServiceDep
from docfence.api.errors import error_responses
from docfence.api.wire import (
    JOB_MARK,
    LABEL_PATTERN,
    PASSWORD_PATTERN,
    REASON_PATTERN,
    BatchItemIn,
    BatchOut,
    EventsOut,
    JobListOut,
    JobOut,
    batch_out,
    caller_value_pattern,
    configured,
    events_out,
    job_out,
)
from docfence.core.clock import monotonic
from docfence.core.errors import InvalidRequest, InvalidWatermark
from docfence.core.fields import MAX_VALUE_CHARS
from docfence.core.policy import MAX_MARKS
from docfence.core.states import JobState
from docfence.service import (
    MAX_BATCH_ITEMS,
    MAX_LIST_LIMIT,
    REASON_CHARS,
    JobDetail,
    JobQuery,
    Principal,
    Service,
    SubmitRequest,
)

MAX_WAIT_S = 20.0  # server cap of ?wait=: no request is held longer than this
SAFETY_POLL_S = 5.0  # ?wait= re-reads the job at least this often, should a wake-up be lost
SUBMIT_THREADS = 8  # bulkhead: uploads fsync; they must never take every thread status reads need
JobId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
#: Checked by Service (check_reason), so the refusal names the field the way every caller sees it; the
#: pattern states the same rule (trimmed, at most REASON_CHARS, no control characters).
Reason = Annotated[str | SkipJsonSchema[None], Query(
    description=f"Why: free text, at most {REASON_CHARS} characters once trimmed, no control characters; "
    "recorded in the audit event as `details.note`", json_schema_extra={"pattern": REASON_PATTERN})]
# Optional multipart fields: an absent field (or an empty one) is None. multipart has no null, so the
# schema states only the text form (SkipJsonSchema).
Text = str | SkipJsonSchema[None]
Mode = Literal["vector", "raster"] | SkipJsonSchema[None]
Number = float | SkipJsonSchema[None]
#: Form fields that carry JSON, published as the JSON they carry (sent as application/json parts).
WatermarkPart = Annotated[Text, WithJsonSchema({**JOB_MARK, "description": "JSON: WatermarkSpec fields"})]
MarksPart = Annotated[Text, WithJsonSchema({"type": "array", "items": JOB_MARK, "minItems": 1,
                                            **configured("max_marks")})]
ClassName = Annotated[Text, WithJsonSchema(configured("document_class"))]
ItemsPart = Annotated[Text, WithJsonSchema({"type": "array", "items": BatchItemIn.model_json_schema(),
                                            "maxItems": MAX_BATCH_ITEMS})]
Deadline = Annotated[Number, WithJsonSchema(configured("deadline_s"))]
_MARKS_CHARS = MAX_MARKS * 4000  # a watermark's JSON fits in 4000 characters, escaped
_BATCH_FILES = {"minItems": 1, "maxItems": MAX_BATCH_ITEMS,  # Service.submit_batch: 1-200 documents
                "items": {"type": "string", "contentMediaType": "application/octet-stream", "minLength": 1}}
_RETRY_AFTER = {"description": "Poll hint in seconds (only while the job is active)",
                "schema": {"type": "string"}}

_LOCATION = {"description": "The job's URL", "schema": {"type": "string"}}
#: On the artifact redirect and the download: no caching, no token in a Referer, no MIME sniffing.
DOWNLOAD_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                    "X-Content-Type-Options": "nosniff"}

StateName = Literal["queued", "rendering", "succeeded", "failed", "canceled"]
router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


def retry_after(state: JobState) -> str | None:
    """Server-chosen poll hint: none once terminal."""
    if state is JobState.QUEUED:
        return "2"
    if state is JobState.RENDERING:
        return "1"
    return None


def _submit_limiter(request: Request) -> anyio.CapacityLimiter:
    limiter: anyio.CapacityLimiter | None = getattr(request.app.state, "submit_limiter", None)
    if limiter is None:
        limiter = request.app.state.submit_limiter = anyio.CapacityLimiter(SUBMIT_THREADS)
    return limiter


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _watermark(raw: str | None) -> dict[str, Any] | None:
    """The form field as a JSON object (NaN and Infinity refused); InvalidWatermark (400) otherwise."""
    if raw is None or raw == "":
        return None
    try:
        value = json.loads(raw, parse_constant=_no_constants)
    except ValueError as exc:
        raise InvalidWatermark(f"watermark must be a JSON object of WatermarkSpec fields ({exc})") from None
    if not isinstance(value, dict):
        raise InvalidWatermark("watermark must be a JSON object of WatermarkSpec fields")
    return value


_LABEL = Form(max_length=200, description="Your own tag for the job (searchable: GET /v1/jobs?label=)",
              json_schema_extra={"pattern": LABEL_PATTERN})
_PASSWORD = Form(max_length=1024, description="The PDF's password: used by its render process only, "
                 "sealed beside the input, never stored in the database, logs or events",
                 json_schema_extra={"pattern": PASSWORD_PATTERN})
_WAIT = Query(ge=0, le=3600, description=f"Wait up to this many seconds (capped at {MAX_WAIT_S:g}) for the "
              "job to end: 201/200 with the ended job, else 202 with the job as it is")


def _marks(raw: str | None) -> list[Any] | None:
    """The `marks` form field as a JSON array of mark objects; InvalidWatermark (400) otherwise."""
    if raw is None or raw == "":
        return None
    try:
        value = json.loads(raw, parse_constant=_no_constants)
    except ValueError as exc:
        raise InvalidWatermark(f"marks must be a JSON array of mark objects ({exc})", field="marks") from None
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise InvalidWatermark("marks must be a JSON array of mark objects", field="marks")
    return value


_HELP = "Value of the {%s} field in mark text (at most %d characters; stored on the job, never logged)"


def _caller_field(name: str) -> Any:
    return Form(max_length=2000, description=_HELP % (name, MAX_VALUE_CHARS[name]),
                json_schema_extra={"pattern": caller_value_pattern(name)})


@router.post(
    "", status_code=201, response_model=JobOut,
    responses={200: {"model": JobOut, "description": "Replay of an earlier identical submission",
                     "headers": {"Location": _LOCATION}},
               201: {"headers": {"Retry-After": _RETRY_AFTER, "Location": _LOCATION}},
               202: {"model": JobOut, "description": "?wait= ran out before the job ended",
                     "headers": {"Retry-After": _RETRY_AFTER, "Location": _LOCATION}},
               **error_responses(400, 401, 403, 409, 413, 415, 422, 503)},
)
async def submit_job(
    http_request: Request, response: Response, service: ServiceDep, principal: JobsSubmit,
    file: Annotated[UploadFile, File(description="The PDF to process (its filename is kept on the job)",
                                     json_schema_extra={"minLength": 1})],
    document_class: Annotated[ClassName, Form(max_length=64)] = None,
    mode: Annotated[Mode, Form()] = None,
    deadline_s: Annotated[Deadline, Form(description="Seconds, within the class's max_deadline_s "
                                         "(checked against the class, named in the error)")] = None,
    watermark: Annotated[WatermarkPart, Form(max_length=4000)] = None,
    label: Annotated[Text, _LABEL] = None,
    password: Annotated[Text, _PASSWORD] = None,
    marks: Annotated[MarksPart, Form(max_length=_MARKS_CHARS, description="JSON array of marks (text "
                                     "with {fields} or a class logo by name, position, pages, opacity, "
                                     "angle, font_size, color, layer); replaces the class's marks")] = None,
    recipient: Annotated[Text, _caller_field("recipient")] = None,
    purpose: Annotated[Text, _caller_field("purpose")] = None,
    reference: Annotated[Text, _caller_field("reference")] = None,
    idempotency_key: Annotated[str | SkipJsonSchema[None], Header(min_length=1, max_length=200)] = None,
    wait: Annotated[float, _WAIT] = 0.0,
) -> JobOut:
    """Submit a watermark job. Same Idempotency-Key and same request: the same job (200).

    The upload must start like a PDF (`%PDF-` within its first 1024 bytes): an empty upload is refused
    with 400 `empty_upload`, anything else with 415 `unsupported_media_type`, before a job exists.
    With `?wait=S` the answer comes once the job ended (or S, capped, ran out: then 202)."""
    request = SubmitRequest(document_class=document_class or None, mode=mode, deadline_s=deadline_s,
                            watermark=_watermark(watermark), idempotency_key=idempotency_key,
                            label=label, filename=file.filename, password=password,
                            marks=_marks(marks), recipient=recipient, purpose=purpose, reference=reference)
    call = functools.partial(service.submit, principal, file.file, request)
    job, created = await anyio.to_thread.run_sync(call, limiter=_submit_limiter(http_request))
    budget = min(wait, MAX_WAIT_S)
    if budget > 0 and not job.terminal:
        detail = await _read_until_terminal(service.get_submitted, principal, job.id, budget, service)
    else:
        detail = await anyio.to_thread.run_sync(service.describe, job, principal)
    response.status_code = 201 if created else 200
    if budget > 0 and not detail.job.terminal:
        response.status_code = 202
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    hint = retry_after(detail.job.state)
    if hint is not None:
        response.headers["Retry-After"] = hint
    return job_out(detail)


@router.post(
    "/batch", response_model=BatchOut,
    responses={200: {"description": "Every item's answer, in order (refused items only with partial=true)"},
               **error_responses(400, 401, 403, 409, 413, 415, 422, 503)},
)
async def submit_batch(
    http_request: Request, service: ServiceDep, principal: JobsSubmit,
    file: Annotated[list[UploadFile], File(description="One part per document, in order",
                                           json_schema_extra=_BATCH_FILES)],
    items: Annotated[ItemsPart, Form(max_length=400_000, description=(
        "JSON array, one object per `file` part in the same order: document_class, mode, deadline_s, "
        "watermark (object), idempotency_key, label, password; each overrides the batch-wide fields"
    ))] = None,
    document_class: Annotated[ClassName, Form(max_length=64)] = None,
    mode: Annotated[Mode, Form()] = None,
    deadline_s: Annotated[Deadline, Form()] = None,
    watermark: Annotated[WatermarkPart, Form(max_length=4000)] = None,
    label: Annotated[Text, _LABEL] = None,
    partial: Annotated[bool, Query(description="Accept the valid items and answer the others with their "
                                   "error (default: one invalid item refuses the whole batch)")] = False,
) -> BatchOut:
    """Submit many documents committed in ONE transaction (at most 200; the whole body is bounded by
    max_upload_bytes). Default: all or nothing, a refused item's error names `items[i].<field>`.
    `partial=true`: per-item acceptance. An item with a known idempotency key replays its job."""
    base = SubmitRequest(document_class=document_class or None, mode=mode, deadline_s=deadline_s,
                         watermark=_watermark(watermark), label=label)
    requests = [replace(base, filename=upload.filename, **options)
                for upload, options in zip(file, _batch_items(items, len(file)), strict=True)]
    call = functools.partial(service.submit_batch, principal,
                             [(upload.file, req) for upload, req in zip(file, requests, strict=True)],
                             partial=partial)
    outcomes = await anyio.to_thread.run_sync(call, limiter=_submit_limiter(http_request))
    filenames = [req.filename for req in requests]
    return await anyio.to_thread.run_sync(batch_out, outcomes, filenames,
                                       functools.partial(service.describe, principal=principal))


def _batch_items(raw: str | None, count: int) -> list[dict[str, Any]]:
    """The per-document options (`items` form field), checked; one empty object per file when absent."""
    if raw is None or raw == "":
        return [{} for _ in range(count)]
    try:
        value = json.loads(raw, parse_constant=_no_constants)
    except ValueError as exc:
        raise InvalidRequest(f"items must be a JSON array of objects ({exc})", field="items") from None
    if not isinstance(value, list) or len(value) != count:
        raise InvalidRequest(f"items must be a JSON array with one object per file ({count})", field="items")
    out = []
    for index, entry in enumerate(value):
        try:
            item = BatchItemIn.model_validate(entry)
        except ValidationError as exc:
            where = ".".join(str(p) for p in exc.errors()[0]["loc"])
            raise InvalidRequest(f"items[{index}]: {exc.errors()[0]['msg']}",
                                 field=f"items[{index}].{where}" if where else f"items[{index}]") from None
        out.append(item.model_dump(exclude_none=True))
    return out


@router.get("", response_model=JobListOut, responses=error_responses(401, 403, 422))
def list_jobs(
    service: ServiceDep, principal: JobsRead,
    state: Annotated[StateName | None, Query()] = None,
    document_class: Annotated[str | None, Query(max_length=64)] = None,
    mode: Annotated[Literal["vector", "raster"] | None, Query()] = None,
    created_after: Annotated[Text, Query(description="Inclusive (RFC 3339, with its zone)",
                                         json_schema_extra={"format": "date-time"})] = None,
    created_before: Annotated[Text, Query(description="Exclusive (RFC 3339, with its zone)",
                                          json_schema_extra={"format": "date-time"})] = None,
    label: Annotated[str | None, Query(max_length=200, description="Exact match")] = None,
    filename: Annotated[str | None, Query(max_length=255, description="Exact match")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 50,
    cursor: Annotated[str | None, Query(max_length=400, description="The last page's next_cursor")] = None,
) -> JobListOut:
    """Your tenant's jobs under the filters, newest first (creation time, then id: a stable order);
    page with `cursor`. Jobs created meanwhile never shift or repeat a page."""
    query = JobQuery(state=state, document_class=document_class or None, mode=mode,
                     created_after=_zoned_time("created_after", created_after),
                     created_before=_zoned_time("created_before", created_before), label=label or None,
                     filename=filename or None, limit=limit, cursor=cursor or None)
    details, nxt = service.list_jobs(principal, query)
    return JobListOut(jobs=[job_out(d) for d in details], next_cursor=nxt)


#: RFC 3339 date-time (the `format` the schema states): a date, a time and a zone, nothing else.
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
                      r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})")
_ZONED = TypeAdapter(AwareDatetime)


def _zoned_time(name: str, raw: str | None) -> datetime | None:
    """A filter time as RFC 3339 with its zone; InvalidRequest naming the parameter otherwise (a bare
    number is not a time here, though pydantic would read it as seconds since 1970)."""
    if raw is None:
        return None
    try:
        if not _RFC3339.fullmatch(raw):
            raise ValueError(raw)
        return _ZONED.validate_python(raw)
    except (ValueError, ValidationError):
        raise InvalidRequest(f"{name} must be an RFC 3339 time with its zone (e.g. 2026-12-01T00:00:00Z)",
                             field=name) from None


@router.get(
    "/{job_id}", response_model=JobOut,
    responses={200: {"headers": {"Retry-After": _RETRY_AFTER}}, **error_responses(401, 403, 404, 422, 503)},
)
async def get_job(
    job_id: JobId, response: Response, service: ServiceDep, principal: JobsRead,
    wait: Annotated[float, Query(ge=0, le=3600, description=f"Long-poll up to this many seconds "
                                 f"(capped at {MAX_WAIT_S:g}) until the job is terminal")] = 0.0,
) -> JobOut:
    """The job's state; `Retry-After` suggests when to ask again while it is active."""
    budget = min(wait, MAX_WAIT_S)
    if budget > 0:
        detail = await _read_until_terminal(service.get, principal, job_id, budget, service)
    else:
        detail = await run_in_threadpool(service.get, principal, job_id)
    hint = retry_after(detail.job.state)
    if hint is not None:
        response.headers["Retry-After"] = hint
    return job_out(detail)


async def _read_until_terminal(
    read: Callable[[Principal, str], JobDetail], principal: Principal, job_id: str, budget_s: float,
    service: Service,
) -> JobDetail:
    """Read the job with `read` (which checks what the key may see), then again each time its end is
    announced (at least every SAFETY_POLL_S), until it is terminal or `budget_s` is spent. No thread is
    held while waiting. The watch starts before the first read, so an end committed at any moment
    after that read wakes this request."""
    until = monotonic() + budget_s
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:  # runs in the store's listener thread: hand the wake-up to this request's loop
        loop.call_soon_threadsafe(woken.set)

    with service.watch_job_end(job_id, on_wake=wake):
        detail = await run_in_threadpool(read, principal, job_id)
        while not detail.job.terminal:
            remaining = until - monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), min(SAFETY_POLL_S, remaining))
            woken.clear()
            detail = await run_in_threadpool(read, principal, job_id)
    return detail


@router.post("/{job_id}/cancel", response_model=JobOut, responses=error_responses(401, 403, 404, 409, 422))
def cancel_job(job_id: JobId, service: ServiceDep, principal: JobsCancel, reason: Reason = None) -> JobOut:
    """Cancel a queued or rendering job. A canceled job is returned unchanged; a succeeded or failed one
    answers 409 `job_already_ended`. `reason` is recorded in the audit event (`details.note`)."""
    return job_out(service.describe(service.cancel(principal, job_id, reason=reason)))


@router.delete("/{job_id}", response_model=JobOut, responses=error_responses(401, 403, 404, 409, 422))
def delete_job(
    job_id: JobId, service: ServiceDep, principal: JobsDelete,
    request_id: Annotated[str, Query(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$",
                                     description="The deletion request this fulfils (recorded)")],
    reason: Reason = None,
) -> JobOut:
    """Delete every byte of the job, keeping its metadata as a tombstone; later downloads answer 410.
    `reason` is recorded in the audit events (`details.note`)."""
    return job_out(service.describe(service.delete(principal, job_id, request_id, reason=reason)))


@router.get("/{job_id}/events", response_model=EventsOut, responses=error_responses(401, 403, 404, 422))
def job_events(job_id: JobId, service: ServiceDep, principal: JobsRead) -> EventsOut:
    """The job's audit timeline and attempt history."""
    events, attempts = service.events(principal, job_id)
    return events_out(job_id, events, attempts)


@router.get(
    "/{job_id}/artifact", status_code=307, response_class=RedirectResponse,
    responses={307: {"description": "Temporary redirect (307, so the method stays GET and nothing is "
                                    "cached) to a short-lived signed URL; send no Authorization there",
                     "headers": {"Location": {"schema": {"type": "string"}}}},
               **error_responses(401, 403, 404, 409, 410, 422)},
)
def job_artifact(job_id: JobId, service: ServiceDep, principal: JobsRead) -> RedirectResponse:
    """Redirect (307) to `/v1/signed/{token}`, valid for `signed_url_ttl_s` and only while the key that
    asked for it is not revoked."""
    token = service.artifact_url_token(principal, job_id)
    return RedirectResponse(f"/v1/signed/{token}", status_code=307, headers=DOWNLOAD_HEADERS)
