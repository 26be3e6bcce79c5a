"""What the client sends and how it reads answers: submission form fields, multipart uploads, the
translation of an error answer to the most specific HttpError, and which job states are settled."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from docfence.client.errors import (
    BY_STATUS,
    ArtifactMissing,
    HttpError,
    JobCanceled,
    JobFailed,
    ServerError,
    UnknownState,
)
from docfence.client.models import KNOWN_STATES, JobView

Document = str | os.PathLike[str] | bytes | tuple[str, bytes]  # a path, bytes, or (filename, bytes)


def raise_for_status(response: httpx.Response) -> None:
    """Translate an error answer to the most specific HttpError, by status and the server's code."""
    if response.status_code < 400:
        if 300 <= response.status_code < 400:
            raise HttpError("unexpected redirect", status=response.status_code, server_code="redirect")
        return
    field = None
    try:
        body = response.json()["error"]
        code, message = str(body["code"]), str(body["message"])
        field = str(body["field"]) if body.get("field") else None
    except (ValueError, KeyError, TypeError, AttributeError):
        code, message = "http_error", f"HTTP {response.status_code}"
    cls = BY_STATUS.get(response.status_code, ServerError if response.status_code >= 500 else HttpError)
    raise cls(f"{code}: {message}", status=response.status_code, server_code=code, field=field)


def upload_part(doc: Document, stack: contextlib.ExitStack) -> tuple[str, Any, str]:
    """One multipart file part; a path is opened (and closed by `stack`) and sends its own name."""
    if isinstance(doc, bytes):
        return ("document.pdf", doc, "application/pdf")
    if isinstance(doc, tuple):
        return (doc[0], doc[1], "application/pdf")
    path = Path(doc)
    return (path.name, stack.enter_context(path.open("rb")), "application/pdf")


def form_options(*, document_class: str | None = None, mode: str | None = None,
                 deadline_s: float | None = None, watermark: Mapping[str, Any] | None = None,
                 label: str | None = None, password: str | None = None) -> dict[str, str]:
    """The submission form fields that were given."""
    data: dict[str, str] = {}
    if document_class:
        data["document_class"] = document_class
    if mode:
        data["mode"] = mode
    if deadline_s is not None:
        data["deadline_s"] = repr(float(deadline_s))
    if watermark is not None:
        data["watermark"] = json.dumps(dict(watermark))
    if label:
        data["label"] = label
    if password:
        data["password"] = password
    return data


def job_from(response: httpx.Response) -> JobView:
    """The job an answer describes, with the server's Retry-After hint."""
    return JobView.from_json(response.json(), response.headers.get("retry-after"))


def settled(job: JobView) -> bool:
    """True for a usable success; raises for every other terminal or unknown state."""
    if job.state == "succeeded":
        if job.artifact is None:
            raise ArtifactMissing(f"job {job.id} succeeded without an artifact")
        return True
    if job.state == "failed":
        raise JobFailed(job)
    if job.state == "canceled":
        raise JobCanceled(job)
    if job.state not in KNOWN_STATES:
        raise UnknownState(f"job {job.id} is in unknown state {job.state!r}")
    return False
