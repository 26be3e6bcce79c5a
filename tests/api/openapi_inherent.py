"""schemathesis hooks for docfence: what the OpenAPI document cannot state, in one place.

Loaded by tests/api/schemathesis.toml (`hooks`), so the recorded `schemathesis run` and the bounded run in
tests/api/test_openapi_conformance.py judge the API alike. docs/api.md lists each entry and why.

Two kinds of entries:
- `before_call` completes a schema-valid (positive) case where validity depends on another field, so
  the case tests everything else: a batch's `items` has one object per file (two lengths), and a caller
  field a mark draws is given, in plain text (whether a mark draws nothing depends on which fields
  came; which characters draw depends on the installed fonts).
- `filter_failure` drops the failures that only content, the server's state or its policy decide
  (INHERENT): an upload that is not a PDF, for one. Uploads stay as generated: every field is checked
  before the upload is read, so a generated case still tests them all.
Nothing else is excused: any other failure fails the run.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
from typing import Any, NamedTuple

import schemathesis

CALLER_FIELDS = ("recipient", "purpose", "reference")
_FIELD_RE = re.compile(r"\{(recipient|purpose|reference)\}")
#: Without a worker (the bounded test) no job ends, and `?wait=` would hold each request up to 20 s.
MAX_WAIT_ENV = "DOCFENCE_FUZZ_MAX_WAIT"


class Inherent(NamedTuple):
    """A failure the schema cannot prevent: on `operation`, a failure of `kind` with this status and
    error code (and the field and a message fragment, where given)."""

    operation: str
    kind: str  # the schemathesis failure class: RejectedPositiveData or AcceptedNegativeData
    status: int
    code: str | None
    field: str | None
    message: str
    why: str


INHERENT = (
    Inherent("POST /v1/jobs", "RejectedPositiveData", 415, "unsupported_media_type", None, "not a PDF",
             "content sniffing: an upload must start like a PDF (%PDF- in its first 1024 bytes)"),
    Inherent("POST /v1/jobs/batch", "RejectedPositiveData", 415, "unsupported_media_type", "items[0].file",
             "not a PDF", "content sniffing, per file of the batch"),
    Inherent("GET /v1/jobs", "RejectedPositiveData", 422, "invalid_request", "cursor", "not a cursor",
             "the cursor is opaque: only a value the server returned as next_cursor is one"),
    Inherent("POST /v1/webhooks/endpoints", "RejectedPositiveData", 422, "invalid_request", "url",
             "non-public address", "an address in the URL must pass the SSRF policy (public, or in "
             "[webhooks] allow_hosts): configuration and address classes, not syntax"),
    Inherent("POST /v1/webhooks/endpoints", "RejectedPositiveData", 422, "invalid_request", "url",
             "enabled webhook endpoints", "a tenant has at most 20 enabled endpoints: a count of stored "
             "rows"),
    Inherent("POST /v1/templates", "RejectedPositiveData", 422, "template_error", None, "JSON Schema",
             "`schema` must itself be a valid JSON Schema (Draft 2020-12, local references only): the "
             "meta-schema is not part of this document"),
    Inherent("POST /v1/templates", "RejectedPositiveData", 422, "template_error", None, "local references",
             "`schema` may refer only inside itself"),
    Inherent("POST /v1/report-requests", "RejectedPositiveData", 422, "invalid_request", "period", "must be",
             "29 February outside leap years and week 53 of a 52-week year are calendar facts"),
    Inherent("GET /v1/jobs/{job_id}", "UseAfterFree", 200, None, None, '"deleted_at":"',
             "DELETE /v1/jobs/{id} erases the job's bytes and keeps its record as a tombstone (its "
             "history is evidence): the job answers 200 with deleted_at set, its artifact 410"),
    Inherent("GET /v1/jobs/{job_id}/events", "UseAfterFree", 200, None, None, '"events":[',
             "a deleted job's audit timeline stays readable: deletion removes bytes, never history"),
    Inherent("POST /v1/jobs/batch", "AcceptedNegativeData", 200, None, None, '"status":"refused"',
             "with partial=true a batch answers 200 and refuses the invalid items one by one, in the body"),
)


def _is_positive(case: Any) -> bool:
    meta = getattr(case, "meta", None)
    return meta is not None and meta.generation.mode.is_positive


def _texts(options: dict[str, Any]) -> list[str]:
    marks = options.get("marks")
    given = [options.get("watermark"), *(marks if isinstance(marks, list) else [])]
    return [m["text"] for m in given if isinstance(m, dict) and isinstance(m.get("text"), str)]


def _give_drawn_fields(options: dict[str, Any]) -> None:
    """Every caller field a mark of these options draws gets a plain value."""
    for name in {n for text in _texts(options) for n in _FIELD_RE.findall(text)}:
        options[name] = f"Example {name}"


def _completed_upload(generated: dict[str, Any], batch: bool) -> dict[str, Any]:
    """A copy of the body (generated values may be shared with other cases), completed."""
    body = copy.deepcopy(generated)
    files = body.get("file")
    if batch:
        count = len(files) if isinstance(files, list) else 1
        items = body.get("items")
        if isinstance(items, list):
            items = items[:count] + [{} for _ in range(count - len(items))]
            for item in items:
                if isinstance(item, dict):
                    _give_drawn_fields(item)
            body["items"] = items
    _give_drawn_fields(body)
    return body


#: id(case) -> the body as generated, put back after the call: schemathesis derives further cases
#: (negative ones too) from a case it has sent, and those must not inherit the completion.
_GENERATED: dict[int, Any] = {}


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    label = case.operation.label
    if label in ("POST /v1/jobs", "POST /v1/jobs/batch") and _is_positive(case) and \
            isinstance(case.body, dict):
        _GENERATED[id(case)] = case.body
        case.body = _completed_upload(case.body, batch=label.endswith("/batch"))
    max_wait = os.environ.get(MAX_WAIT_ENV)
    if max_wait is not None and isinstance(case.query, dict) and "wait" in case.query:
        with contextlib.suppress(TypeError, ValueError):  # a negative case's non-number: sent as is
            case.query = {**case.query, "wait": min(float(case.query["wait"]), float(max_wait))}


@schemathesis.hook
def after_call(ctx: Any, case: Any, response: Any) -> None:
    if id(case) in _GENERATED:
        case.body = _GENERATED.pop(id(case))


def _error(text: str) -> tuple[str | None, str | None, str]:
    try:
        error = json.loads(text).get("error") or {}
    except (ValueError, AttributeError):
        return None, None, text
    return error.get("code"), error.get("field"), error.get("message", "")


def inherent(failure: Any, case: Any, status: int, text: str) -> Inherent | None:
    """The INHERENT entry this failure is, if any."""
    code, field, message = _error(text)
    for entry in INHERENT:
        if (entry.operation == case.operation.label and entry.kind == type(failure).__name__
                and entry.status == status and entry.code in (None, code) and entry.field == field
                and entry.message in (message if entry.code else text)):
            return entry
    return None


#: A file to append one line per excused failure to ("operation | status | why"), to count them.
EXCUSED_LOG_ENV = "DOCFENCE_FUZZ_EXCUSED_LOG"


@schemathesis.hook
def filter_failure(ctx: Any, failure: Any, case: Any, response: Any) -> bool:
    entry = inherent(failure, case, response.status_code, response.text)
    log = os.environ.get(EXCUSED_LOG_ENV)
    if entry is not None and log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{entry.operation} | {entry.kind} {entry.status} | {entry.why}\n")
    return entry is None
