"""Wire models of the HTTP API (what the OpenAPI document publishes) and their builders from records."""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, WithJsonSchema
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from docfence.api.validation_out import ValidationOut, validation_out
from docfence.core.fields import FIELD_NAMES, MAX_VALUE_CHARS
from docfence.core.marks import marks_view
from docfence.core.policy import POSITIONS
from docfence.core.records import Attempt, AuditEvent, Job
from docfence.service import REASON_CHARS, BatchOutcome, JobDetail

# -- what the OpenAPI document states of request values ---------------------------------------------
# The service enforces these rules (with messages that name the field); the patterns below state the
# same rules from the same constants, and tests/api/test_openapi_conformance.py proves they agree.
# They read alike in Python's `re`, ECMA-262 (with the `u` flag) and Rust's fancy-regex (what
# schemathesis validates with): no `\s` or `\S` (engines disagree on \x1c-\x1f), whitespace is
# spelled out as str.strip() sees it.

#: Schema key naming a fact of the configuration (document classes, processors, class limits, logos);
#: docs.publish_openapi replaces every node that carries it by what the settings say.
CONFIGURED = "x-docfence-configured"
CONTROLS = r"\x00-\x1f\x7f"  # what a reason and a label may not hold (check_reason, check_label)


def ecma_compiled(pattern: str) -> re.Pattern[str]:
    """`pattern` for Python's `re.search` with the JSON Schema meaning of a final `$` (the end of the
    text; Python's also matches before a final newline)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


@dataclass(frozen=True)
class Matches:
    """`Annotated` metadata of a text field: it must match `pattern` (a search, so anchor it), which the
    schema publishes as its `pattern`; a refusal says `message` (not the pattern)."""

    pattern: str
    message: str

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        compiled = ecma_compiled(self.pattern)

        def check(value: Any) -> Any:
            if isinstance(value, str) and not compiled.search(value):
                raise ValueError(self.message)
            return value

        return core_schema.no_info_after_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        published = handler(schema)
        published["pattern"] = self.pattern
        return published


def configured(fact: str, **schema: Any) -> dict[str, Any]:
    """`json_schema_extra` of a value whose allowed range the configuration decides."""
    return {CONFIGURED: fact, **schema}


_CLASSES: dict[str, Callable[[str], bool]] = {
    "whitespace": str.isspace,  # what str.strip() trims
    "text": lambda ch: unicodedata.category(ch)[0] != "C",  # what core.fields.check_value takes
    "drawn": lambda ch: unicodedata.category(ch)[0] != "C" and not ch.isspace(),
}


@functools.cache
def code_point_class(kind: Literal["whitespace", "text", "drawn"]) -> str:
    """A regex class body of the code points of `kind` in this Python's Unicode database: "whitespace"
    (str.isspace), "text" (not Unicode category C: control, format, surrogate, private, unassigned,
    which core.fields.check_value refuses) or "drawn" (text, not whitespace). Listed, never negated:
    generators draw from a listed class ten times faster. BMP code points are `\\u` escapes, others
    literal characters."""
    wanted = _CLASSES[kind]
    parts, start = [], None
    for cp in range(sys.maxunicode + 2):
        inside = cp <= sys.maxunicode and wanted(chr(cp))
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            parts.extend(_class_range(start, cp - 1))
            start = None
    return "".join(parts)


def _class_range(first: int, last: int) -> list[str]:
    def one(cp: int) -> str:
        return f"\\u{cp:04x}" if cp <= 0xFFFF else chr(cp)

    if first <= 0xFFFF < last:  # a \\u escape cannot name an astral code point
        return [*_class_range(first, 0xFFFF), *_class_range(0x10000, last)]
    return [one(first) if first == last else f"{one(first)}-{one(last)}"]


def trimmed_text_pattern(max_chars: int, edge: str, inner: str) -> str:
    """Free text the service trims (str.strip) before it checks it: at most `max_chars` left, which
    begin and end with a character of the class `edge` and hold only `inner` ones between. Leading and
    trailing whitespace of any kind is trimmed away. (No lookarounds: generators draw them slowly.)"""
    ws = code_point_class("whitespace")
    return rf"^[{ws}]*(?:{edge}(?:{inner}{{0,{max_chars - 2}}}{edge})?)?[{ws}]*$"


def caller_value_pattern(name: str) -> str:
    """A `{recipient}`, `{purpose}` or `{reference}` value as core.fields.check_value takes it."""
    return trimmed_text_pattern(MAX_VALUE_CHARS[name], f"[{code_point_class('drawn')}]",
                                f"[{code_point_class('text')}]")


REASON_PATTERN = trimmed_text_pattern(REASON_CHARS, f"[^{code_point_class('whitespace')}{CONTROLS}]",
                                      f"[^{CONTROLS}]")
LABEL_PATTERN = f"^[^{CONTROLS}]*$"  # with maxLength 200; empty means none
PASSWORD_PATTERN = r"^[^\x00]*$"


def mark_text_pattern(fields: Sequence[str] = FIELD_NAMES) -> str:
    """Mark text: literal text, `{{` and `}}` for braces, and `{name}` for the given fields; not only
    whitespace (it would draw nothing)."""
    names = "|".join(sorted(fields, key=len, reverse=True))
    ws = code_point_class("whitespace")
    drawn = rf"\{{\{{|\}}\}}|\{{(?:{names})\}}"
    # whitespace, then one token that is not whitespace, then any tokens (no lookahead, as above)
    return rf"^[{ws}]*(?:[^{{}}{ws}]|{drawn})(?:[^{{}}]|{drawn})*$"


def _spaced(word: str) -> str:
    return " *".join(word)  # core.policy ignores every space in `pages`, even inside a word


_NUMBER = r"\d(?: *\d)*"
_RANGE = rf"{_NUMBER}(?: *- *{_NUMBER})?"
PAGES_PATTERN = (rf"^ *(?:{'|'.join(_spaced(w) for w in ('all', 'first', 'last', 'odd', 'even'))}|"
                 rf"{_RANGE}(?: *, *{_RANGE})*) *$")


def mark_schema(image: dict[str, Any]) -> dict[str, Any]:
    """One mark (or the watermark fields over the class's mark) as JSON: every field optional, no
    others. `image` is the schema of the logo field (a class logo name for jobs, a data URI for
    reports)."""
    number = {"type": "number"}
    return {
        "type": "object", "additionalProperties": False,
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": 200, **configured("mark_text"),
                     "description": "Mark text; {field} for dynamic fields, {{ and }} for braces"},
            "position": {"enum": list(POSITIONS)},
            "pages": {"type": "string", "maxLength": 200, "pattern": PAGES_PATTERN},
            "opacity": {**number, "exclusiveMinimum": 0, "maximum": 1},
            "angle": {"anyOf": [{**number, "minimum": -360, "maximum": 360}, {"type": "null"}]},
            "font_size": {"anyOf": [{**number, "minimum": 1, "maximum": 500}, {"type": "null"}]},
            "color": {"type": "array", "items": {**number, "minimum": 0, "maximum": 1},
                      "minItems": 3, "maxItems": 3},
            "layer": {"enum": ["overlay", "underlay"]},
            "image": image,
        },
    }


#: A job's `watermark` / `marks` entry names a class logo (the configuration lists them).
JOB_MARK = mark_schema(configured("mark_image"))


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
    # a job that failed validation: which check failed, on which page, what differed
    validation: ValidationOut | None = None


class JobListOut(BaseModel):
    """One page of jobs, newest first; pass `next_cursor` as `cursor` for the next (null: last page)."""

    jobs: list[JobOut]
    next_cursor: str | None


def _nullable(schema: dict[str, Any]) -> Any:
    return WithJsonSchema({"anyOf": [schema, {"type": "null"}]})


def _text(pattern: str, max_length: int) -> Any:
    text = {"type": "string", "maxLength": max_length, "pattern": pattern}
    return WithJsonSchema({"anyOf": [text, {"type": "null"}]})


class BatchItemIn(BaseModel):
    """One document's options in a batch (all optional; the batch-wide form fields fill the gaps)."""

    model_config = ConfigDict(extra="forbid")

    document_class: Annotated[str | None, _nullable(configured("document_class"))] = None
    mode: Literal["vector", "raster"] | None = None
    deadline_s: Annotated[float | None, _nullable(configured("deadline_s"))] = None
    watermark: Annotated[dict[str, Any] | None, _nullable(JOB_MARK)] = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    label: Annotated[str | None, _text(LABEL_PATTERN, 200)] = Field(default=None, max_length=200)
    password: Annotated[str | None, _text(PASSWORD_PATTERN, 1024)] = Field(default=None, max_length=1024)
    marks: Annotated[list[dict[str, Any]] | None, _nullable(
        {"type": "array", "items": JOB_MARK, "minItems": 1, **configured("max_marks")})] = None
    recipient: Annotated[str | None, _text(caller_value_pattern("recipient"), 2000)] = Field(
        default=None, max_length=2000)
    purpose: Annotated[str | None, _text(caller_value_pattern("purpose"), 2000)] = Field(
        default=None, max_length=2000)
    reference: Annotated[str | None, _text(caller_value_pattern("reference"), 2000)] = Field(
        default=None, max_length=2000)


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
        validation=validation_out(detail.failed_validation),
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
