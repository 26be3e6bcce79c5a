"""Client-side errors, all under core's ApiError with stable codes.

    ApiError
    ├── HttpError                 the server answered 4xx/5xx (`status`, the server's `server_code`)
    │   ├── Unauthorized (401), Forbidden (403), InvalidRequest (400, 422): core's errors of those
    │   │   names as HTTP answers (defined once, in core.errors; `except core.errors.Forbidden`
    │   │   catches the client's too)
    │   ├── JobNotFound (404), Conflict (409), Gone (410), PayloadTooLarge (413),
    │   └── UnsupportedMediaType (415), ServerError (5xx)
    ├── TransportError            no answer (connection refused, reset, request timeout)
    ├── PollTimeout               this caller's wait budget ran out; the job goes on (carries job_id)
    ├── JobFailed / JobCanceled   the job reached that terminal state (carries the JobView)
    ├── UnknownState              the server reported a state this client does not know
    ├── ArtifactMissing           succeeded without an artifact: a broken promise, never "done"
    └── DownloadIntegrityError    the downloaded bytes do not match the artifact's sha256
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from docfence.core import errors
from docfence.core.errors import ApiError

if TYPE_CHECKING:
    from docfence.client.models import JobView


class HttpError(ApiError):
    """The docfence API answered with an error."""

    code = "http_error"

    def __init__(self, message: str | None = None, *, status: int = 0, server_code: str = "",
                 field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.status, self.server_code = status, server_code


def _answered(error: type[errors.RequestError]) -> type[HttpError]:
    """core's `error` as an HTTP answer: its code, message and place in the tree come from core (listed
    first, so they win), status and server_code from HttpError."""
    return type(error.__name__, (error, HttpError), {"__doc__": error.__doc__, "__module__": __name__})


Unauthorized = _answered(errors.Unauthorized)
Forbidden = _answered(errors.Forbidden)
InvalidRequest = _answered(errors.InvalidRequest)


class JobNotFound(HttpError):
    """No such job (or it belongs to another tenant)."""

    code = "not_found"


class Conflict(HttpError):
    """The request conflicts with the job's state or an earlier request."""

    code = "conflict"


class Gone(HttpError):
    """The artifact was deleted."""

    code = "gone"


class PayloadTooLarge(HttpError):
    """The upload is too large."""

    code = "upload_too_large"


class UnsupportedMediaType(HttpError):
    """The server refused the upload's type (it is not a PDF)."""

    code = "unsupported_media_type"


class ServerError(HttpError):
    """The server failed."""

    code = "server_error"


class TransportError(ApiError):
    """The docfence API could not be reached."""

    code = "transport_error"


class PollTimeout(ApiError):
    """The wait budget ran out before the job reached a terminal state; the job itself goes on."""

    code = "poll_timeout"

    # Every argument has a default: core's all_codes() instantiates each error class bare.
    def __init__(self, job_id: str = "", last: JobView | None = None, message: str | None = None) -> None:
        super().__init__(message or (f"job {job_id} was not terminal within the wait budget" if job_id
                                     else None))
        self.job_id, self.last = job_id, last


class _JobEnded(ApiError):
    def __init__(self, job: JobView | None = None) -> None:
        message = None
        if job is not None:
            detail = f": {job.error_code}: {job.error_message}" if job.error_code else ""
            message = f"job {job.id} ended as {job.state}{detail}"
        super().__init__(message)
        self.job = job
        self.job_id = job.id if job is not None else ""


class JobFailed(_JobEnded):
    """The job failed."""

    code = "job_failed"


class JobCanceled(_JobEnded):
    """The job was canceled (on request or because its deadline passed)."""

    code = "job_canceled"


class UnknownState(ApiError):
    """The server reported a job state this client does not know."""

    code = "unknown_state"


class ArtifactMissing(ApiError):
    """The job succeeded but names no artifact."""

    code = "artifact_missing"


class DownloadIntegrityError(ApiError):
    """The downloaded bytes do not match the artifact's sha256; nothing was written."""

    code = "download_integrity"


BY_STATUS: dict[int, type[HttpError]] = {
    401: Unauthorized, 403: Forbidden, 404: JobNotFound, 409: Conflict, 410: Gone,
    400: InvalidRequest, 413: PayloadTooLarge, 415: UnsupportedMediaType, 422: InvalidRequest,
}
