"""Public verification routes (no key, rate-limited per client address): what a recipient who scanned a
document's QR code may learn about it, and whether the file in their hands is the one issued."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, FastAPI, Form, Query, UploadFile
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema
from starlette.concurrency import run_in_threadpool

from docfence.api.deps import ServiceDep
from docfence.api.errors import error_responses
from docfence.api.jobs import JobId
from docfence.api.rate_limit import ClientAddress, ClientRateLimiter, RateLimitMiddleware
from docfence.api.upload_limits import UploadCap
from docfence.api.wire import Matches
from docfence.config import Settings

router = APIRouter(prefix="/v1/verify", tags=["verification"])
Code = Annotated[str | None, Query(alias="c", max_length=64, description="The code printed in the QR URL")]


class VerifyOut(BaseModel):
    """Everything a recipient is told: never content, recipient or tenant."""

    organisation: str
    issued_at: datetime
    sha256: str
    deleted: bool


class VerifyFileIn(BaseModel):
    """Exactly one of the document and its sha256: the schema's `oneOf` and the validator say the same."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["file"]}, {"required": ["sha256"]}]})

    file: UploadFile | SkipJsonSchema[None] = Field(default=None, description="The document to compare")
    sha256: Annotated[str, Matches(r"^[0-9A-Fa-f]{64}$", "sha256 must be 64 hexadecimal characters")] | \
        SkipJsonSchema[None] = Field(default=None, max_length=64, description="Or only its sha256 (hex)")

    @model_validator(mode="after")
    def _exactly_one(self) -> VerifyFileIn:
        if self.file is None and self.sha256 is None:
            raise ValueError("give the file or its sha256 (one of them)")
        if self.file is not None and self.sha256 is not None:
            raise ValueError("give either the file or its sha256, not both")
        return self


class MatchOut(BaseModel):
    match: bool
    sha256: str  # the hash that was compared (of the uploaded file, or as given)


@router.get("/{job_id}", response_model=VerifyOut, responses=error_responses(404, 422, 429))
def verify(job_id: JobId, service: ServiceDep, c: Code = None) -> VerifyOut:
    """Who issued the document, when, the sha256 of the issued file, and whether it was deleted since.
    404 for an unknown id, a wrong code, or a job that issued no verifiable document (alike)."""
    record = service.verifier.record(job_id, c)
    return VerifyOut(organisation=record.organisation, issued_at=record.issued_at, sha256=record.sha256,
                     deleted=record.deleted)


@router.post("/{job_id}", response_model=MatchOut, responses=error_responses(404, 413, 422, 429))
async def verify_file(job_id: JobId, service: ServiceDep,
                      form: Annotated[VerifyFileIn, Form(media_type="multipart/form-data")],
                      c: Code = None) -> MatchOut:
    """Whether a file (or its sha256) is the issued document, byte for byte. Exactly one of `file` and
    `sha256`; the same 404 as GET for anything that is not a verifiable document. Anyone may call it,
    so a file may have at most `server.max_verify_upload_bytes` (4 MiB by default; 413
    `upload_too_large` beyond, before the body is read): send the sha256 of a larger one."""
    file = form.file
    match, digest = await run_in_threadpool(service.verifier.matches, job_id, c, sha256=form.sha256,
                                            file=file.file if file is not None else None)
    return MatchOut(match=match, sha256=digest)


def install(app: FastAPI, settings: Settings, clock: Callable[[], float]) -> None:
    """The routes, their upload cap and their per-address limiter (mounted inside the request gate's body
    limits; the limiter runs first, so refused uploads cost a request too); `clock` is the service's
    monotonic clock, so tests refill the buckets by moving a fake clock."""
    app.include_router(router)
    config = settings.verification
    app.add_middleware(UploadCap, prefix=router.prefix + "/", method="POST",
                       max_file_bytes=settings.server.max_verify_upload_bytes, server=settings.server)
    app.add_middleware(RateLimitMiddleware, prefix=router.prefix + "/",
                       limiter=ClientRateLimiter(config.requests_per_minute, config.burst, clock=clock),
                       clients=ClientAddress(settings.server.trusted_proxies))
