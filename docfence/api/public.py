"""Routes that need no API key: capabilities, health, readiness and signed artifact downloads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from docfence.api.deps import ServiceDep
from docfence.api.errors import HTTP_LAYER_CODES, error_responses
from docfence.api.jobs import DOWNLOAD_HEADERS, MAX_WAIT_S
from docfence.api.wire import CapabilitiesOut, ClassOut, StatusOut
from docfence.core.errors import DocfenceError, all_codes
from docfence.core.policy import Mode
from docfence.service import Download

router = APIRouter()


@router.get("/v1/capabilities", response_model=CapabilitiesOut, tags=["meta"])
def capabilities(service: ServiceDep) -> CapabilitiesOut:
    """Modes, document classes, limits and every stable error code."""
    settings = service.settings
    classes = [
        ClassOut(name=c.name, mode=c.mode.value, deadline_s=c.deadline_s, max_deadline_s=c.max_deadline_s,
                 max_attempts=c.max_attempts)
        for c in settings.all_classes().values()
    ]
    limits = settings.limits
    return CapabilitiesOut(
        modes=[m.value for m in Mode], document_classes=classes, default_class=settings.default_class,
        limits={"max_pages": limits.max_pages, "max_input_bytes": limits.max_input_bytes,
                "render_timeout_s": limits.render_timeout_s},
        max_upload_bytes=settings.max_upload_bytes, max_wait_s=MAX_WAIT_S,
        signed_url_ttl_s=settings.signed_url_ttl_s,
        error_codes=dict(sorted({**_error_codes(), **HTTP_LAYER_CODES}.items())),
    )


def _error_codes() -> dict[str, str]:
    """core's all_codes(); if some loaded subclass cannot be built bare (all_codes instantiates each),
    read codes and docstrings off the classes instead, so capabilities never fails for it."""
    try:
        return all_codes()
    except TypeError:
        out: dict[str, str] = {}
        stack: list[type[DocfenceError]] = [DocfenceError]
        while stack:
            cls = stack.pop()
            doc = (cls.__doc__ or "").strip().splitlines()
            out.setdefault(str(cls.code), doc[0] if doc else str(cls.code))
            stack.extend(cls.__subclasses__())
        return out


@router.get("/healthz", response_model=StatusOut, tags=["meta"])
async def healthz() -> StatusOut:
    """The process answers (on the event loop itself: it needs no worker thread, so it answers even
    when every thread is busy)."""
    return StatusOut(status="ok")


class ReadyOut(BaseModel):
    status: str
    reason: str | None = None  # set when the store answers but cannot serve this version (schema)


@router.get("/readyz", response_model=ReadyOut, tags=["meta"], responses={503: {"model": ReadyOut}})
async def readyz(service: ServiceDep) -> JSONResponse:
    """The store answers and its schema is current for this version (every migration it ships is
    applied); 503 otherwise, with a `reason` naming the schema versions when the schema is behind."""
    answer = await run_in_threadpool(service.readiness)
    body = {"status": "ok" if answer.ready else "unavailable"}
    if answer.reason is not None:
        body["reason"] = answer.reason
    return JSONResponse(body, status_code=200 if answer.ready else 503)


@router.get(
    "/v1/signed/{token}", tags=["jobs"], response_class=StreamingResponse,
    responses={200: {"content": {"application/pdf": {}}, "description": "The artifact bytes"},
               **error_responses(403, 410, 422)},
)
def signed_download(token: Annotated[str, Path(min_length=1, max_length=1000)],
                    service: ServiceDep) -> StreamingResponse:
    """Serve an artifact by signed token (no Authorization). 403 expired, tampered or minted by a key
    revoked since; 410 deleted. Bytes that fail their sha256 are never delivered whole: the last chunk
    is held back until every byte is verified, and a mismatch aborts the connection (and is audited)."""
    download = service.open_signed(token)
    headers = {"Content-Length": str(download.size), "X-Content-SHA256": download.sha256,
               "Content-Disposition": f'attachment; filename="{download.job_id}.pdf"', **DOWNLOAD_HEADERS}
    return StreamingResponse(_chunks(download), media_type="application/pdf", headers=headers)


def _chunks(download: Download) -> Iterator[bytes]:
    """Streams the verified chunks; an integrity error mid-stream aborts the response, so the client
    sees a body shorter than its Content-Length and fails."""
    try:
        yield from download.chunks
    finally:
        download.close()
