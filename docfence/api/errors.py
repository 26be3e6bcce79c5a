"""The one error -> HTTP table, and the handlers that give every error the same JSON shape:
`{"error": {"code": ..., "message": ...}}` (validation 422s and unknown routes included).

Every 500 answer also carries `error.error_id` and the `X-Error-Id` header: the server log holds that
error's traceback (frames and exception types, never messages) at ERROR under the same id."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from docfence.api.wire import ErrorBody, ErrorDetail
from docfence.core.errors import DocfenceError, InternalError
from docfence.core.ids import new_id
from docfence.core.loops import safe_traceback

log = logging.getLogger(__name__)

#: Stable error code -> HTTP status. A subclass without its own row uses its nearest ancestor's.
STATUS_BY_CODE: dict[str, int] = {
    "invalid_request": 422,
    "invalid_watermark": 400,
    "invalid_report_data": 400,
    "empty_upload": 400,
    "unsupported_media_type": 415,
    "config_invalid": 422,
    "document_error": 422,
    "region_not_approved": 422,
    "unauthorized": 401,
    "forbidden": 403,
    "signed_url_invalid": 403,
    "signed_url_revoked": 403,
    "signed_url_expired": 403,
    "not_found": 404,
    "idempotency_conflict": 409,
    "template_id_taken": 409,
    "illegal_transition": 409,
    "retry_would_fail": 409,  # the report's job failed deterministically: a retry would fail again
    "stale_attempt": 409,
    "artifact_not_ready": 409,
    "artifact_gone": 410,
    "object_not_found": 410,
    "upload_too_large": 413,
    "store_unavailable": 503,
    "storage_error": 503,
    "storage_full": 507,
    "object_integrity": 500,
    "internal_error": 500,
}

#: Codes for errors raised by the HTTP layer itself (routing, validation, body limit).
_HTTP_CODES = {400: "malformed_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 408: "request_timeout", 413: "upload_too_large",
               422: "invalid_request"}


#: Messages of the HTTP-layer codes, published by /v1/capabilities next to core's all_codes().
HTTP_LAYER_CODES = {
    "malformed_request": "The request body is malformed.",
    "method_not_allowed": "That method is not allowed on this path.",
    "request_timeout": "The request headers or body did not arrive in time; the connection was closed.",
    "http_error": "The HTTP request was refused.",
    "rate_limited": "Too many requests from this address on a route without a key; retry after Retry-After.",
}


def status_for(exc: DocfenceError) -> int:
    for cls in type(exc).__mro__:
        code = getattr(cls, "code", None)
        if code in STATUS_BY_CODE:
            return STATUS_BY_CODE[code]
    return 500


#: The header naming a 500 answer's error id (the same id as in its body and in the server log).
ERROR_ID_HEADER = "X-Error-Id"


class InternalErrorDetail(ErrorDetail):
    error_id: str = Field(description="Names this error's traceback in the server log: quote it when "
                                      "reporting the error.", examples=["err_0193a5c0b2f10000a1b2c3d4e5f6"])


class InternalErrorBody(BaseModel):
    """The error shape of a 500 answer: the one shape, plus the error id."""

    error: InternalErrorDetail


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, field: str | None = None
) -> JSONResponse:
    """The one error shape; `field` (the request field at fault) only when one is known."""
    body = ErrorBody.model_validate({"error": {"code": code, "message": message, "field": field}})
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def internal_error_response(
    exc: BaseException, request: Request | None = None, *, code: str = "internal_error",
    message: str = "internal error", headers: dict[str, str] | None = None, error_id: str | None = None,
    where: str | None = None,
) -> JSONResponse:
    """A 500 answer for `exc`: a new error id (or `error_id`) in the body and the X-Error-Id header, and
    one ERROR log line under that id with `where` (default: the request's method and route template)
    and the traceback (without --debug: this line is how a 500 is diagnosed)."""
    error_id = error_id or new_id("err")
    if where is None and request is not None:  # the route template: a raw path may hold a token
        route = getattr(request.scope.get("route"), "path", None)
        where = f"{request.method} {route or '(no route)'}"
    log.error("internal error %s on %s: %s (%s)\n%s", error_id, where, code, type(exc).__name__,
              safe_traceback(exc))
    body = InternalErrorBody.model_validate({"error": {"code": code, "message": message,
                                                       "error_id": error_id}})
    return JSONResponse(body.model_dump(exclude_none=True), status_code=500,
                        headers={**(headers or {}), ERROR_ID_HEADER: error_id})


async def _docfence_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DocfenceError)
    status = status_for(exc)
    message = exc.message if status < 500 else (type(exc).__doc__ or exc.code).strip().splitlines()[0]
    if status == 500:
        known = exc.error_id if isinstance(exc, InternalError) else None
        return internal_error_response(exc, request, code=exc.code, message=message, error_id=known)
    if status > 500:
        log.error("request failed with %s", exc.code, exc_info=exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if status in (503, 507):  # an outage (503) or a full storage (507): both pass
        headers = {"Retry-After": "1"}
    return error_response(status, exc.code, message, headers, field=exc.field if status < 500 else None)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    parts = []
    errors = exc.errors()
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return error_response(422, "invalid_request", "; ".join(parts) or "invalid request",
                          field=_request_field(errors[0].get("loc", ())) if errors else None)


def _request_field(loc: Any) -> str | None:
    """The top-level request field a validation error is about (`("body", "period")` -> "period"), or
    None when the error is about the body as a whole."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    return parts[0] if parts else None


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    headers = dict(exc.headers) if exc.headers else None
    return error_response(exc.status_code, code, str(exc.detail), headers)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return internal_error_response(exc, request)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DocfenceError, _docfence_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the given statuses, all with the one error shape (500: with its
    error id)."""
    return {status: {"model": InternalErrorBody if status == 500 else ErrorBody,
                     "description": _DESCRIPTIONS.get(status, "Error")}
            for status in statuses}


_DESCRIPTIONS = {
    400: "Malformed request body", 401: "Missing, wrong or revoked API key", 403: "Forbidden",
    408: "Request headers or body too slow", 415: "Not a PDF",
    404: "Not found", 409: "Conflict", 410: "Gone", 413: "Upload too large", 422: "Invalid request",
    429: "Too many requests from this address",
    500: "Internal error (error.error_id and X-Error-Id name its traceback in the server log)",
    503: "Unavailable", 507: "Storage full (no space left; retried by the workers, retry later)",
}
