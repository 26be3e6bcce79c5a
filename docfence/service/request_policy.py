"""What the caller of a submission chose (SubmitRequest), checked before any job exists: marks and
field values a render can draw, and the request hash that makes a repeated submission idempotent."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from docfence.core.errors import ConfigError, InvalidWatermark
from docfence.core.fields import CALLER_FIELDS, JOB_FIELDS, check_value
from docfence.core.marks import MarkRules, blank_marks, resolve_marks
from docfence.core.policy import JobPolicy, WatermarkSpec


@dataclass(frozen=True)
class SubmitRequest:
    """What a caller may choose; everything else comes from the document class."""

    document_class: str | None = None
    mode: str | None = None
    deadline_s: float | None = None
    watermark: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    label: str | None = None  # the caller's tag, searchable (GET /v1/jobs?label=); never logged
    filename: str | None = None  # the upload's original name (folders are dropped); never logged
    password: str | None = field(default=None, repr=False)  # the PDF's; sealed beside the input only
    marks: Sequence[Mapping[str, Any]] | None = None  # the job's own marks, within its class's rules
    recipient: str | None = None  # the dynamic fields a caller gives (core/fields.py)
    purpose: str | None = None
    reference: str | None = None


def checked_marks(rules: MarkRules, base: WatermarkSpec,
           request: SubmitRequest) -> tuple[WatermarkSpec, tuple[WatermarkSpec, ...]]:
    """The job's marks (the class's, the caller's watermark over the first, or the caller's own list)
    with the caller's field values checked; InvalidWatermark (400) names the field at fault."""
    try:
        first, more = resolve_marks(rules, base, given_watermark=request.watermark, given_marks=request.marks)
        caller = {name: check_value(name, value) for name, value in caller_fields(request).items()}
        blank = blank_marks((first, *more), {**caller, **{name: "x" for name in JOB_FIELDS}})
        if blank:
            raise ConfigError(f"mark {blank[0]} draws nothing once its fields are filled (give "
                              f"{', '.join(CALLER_FIELDS)} as its text needs)", field="marks")
        _drawable((first, *more), caller)
    except ConfigError as exc:
        where = exc.field if exc.field in CALLER_FIELDS else ("marks" if request.marks is not None
                                                              else "watermark")
        raise InvalidWatermark(exc.message, field=where) from None
    return first, more


def _drawable(marks: tuple[WatermarkSpec, ...], caller: Mapping[str, str]) -> None:
    """Images decoded and converted, and the caller's values laid out, now as the render will: a logo
    or a recipient no installed font can draw fails the submission (naming the field), not the job."""
    from docfence.engines.mark_art import check_image
    from docfence.engines.outline_text import outline_text

    used = {name for spec in marks for name in spec.fields}
    for name, value in caller.items():
        if name in used and value.strip():
            try:
                outline_text(value)
            except ConfigError:
                raise ConfigError(f"{name} holds a character no installed font can draw",
                                  field=name) from None
    for spec in marks:
        if spec.image is not None:
            check_image(spec.image)


def caller_fields(request: SubmitRequest) -> dict[str, str]:
    given = {"recipient": request.recipient, "purpose": request.purpose, "reference": request.reference}
    return {name: value for name, value in given.items() if value is not None}


def request_hash(input_sha256: str, policy: JobPolicy, request: SubmitRequest) -> str:
    """Same bytes + same caller choices = same request (class mode changes do not create conflicts).
    A label, and whether a password came, count only when given (so older keys keep their hash); the
    filename never does, nor the password itself (no digest of it is ever stored)."""
    chosen: dict[str, Any] = {"document_class": policy.document_class, "mode": request.mode,
                              "deadline_s": request.deadline_s, "watermark": dict(request.watermark or {})}
    if request.label:
        chosen["label"] = request.label
    if request.password:
        chosen["password"] = True
    if request.marks is not None:  # only when given: requests from before marks keep their hash
        chosen["marks"] = [dict(m) for m in request.marks]
    chosen.update(caller_fields(request))
    canonical = json.dumps(chosen, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{input_sha256}\n{canonical}".encode()).hexdigest()
