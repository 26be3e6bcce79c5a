"""The one error tree of docfence. Every error has a stable `code`; its docstring is the default message.

    DocfenceError
    ├── ConfigError                    bad setting, found at start-up
    ├── StoreError                     the job store
    │   ├── NotFound
    │   ├── IdempotencyConflict        same key, different request
    │   ├── IllegalTransition          not in core.states.TRANSITIONS
    │   │   ├── JobAlreadyEnded        cancel asked of a job that already succeeded or failed
    │   │   └── RetryWouldFail         retry asked of a report whose job failed the same way every try
    │   ├── TemplateIdTaken            the template id belongs to another tenant (or is shared)
    │   ├── StaleAttempt               fenced update matched zero rows: discard the work
    │   │   └── LeaseLost              heartbeat refused: the lease belongs to nobody or someone else
    │   └── StoreUnavailable           connection dropped / database locked
    │       └── StoreConflict          PostgreSQL rolled back a deadlock or serialization failure
    ├── BlobError                      artifact storage
    │   ├── BlobNotFound
    │   ├── BlobIntegrityError         sha256 mismatch on read
    │   ├── StorageFull                no space left on the device or bucket quota (retryable)
    │   └── RegionNotApproved
    ├── DocumentError                  the document fails its own job (permanent unless noted)
    │   ├── NotAPdf, MalformedPdf, NoPages, PageTreeInvalid, CorruptContent
    │   ├── PasswordRequired, InvalidPassword, EncryptionForbidsModification
    │   ├── OverLimits, UnsupportedFeature
    │   ├── ActiveContentRefused       the class refuses active content (JavaScript, launch, XFA, ...)
    │   ├── FormTreeInvalid            the form field tree loops or shares a field between parents
    │   ├── ResourceCycle              a form, pattern or Type3 font draws itself
    │   ├── ValidationFailed           the output broke its fidelity contract
    │   ├── SigningRefused             the class signs its outputs and this one cannot be signed
    │   ├── TemplateError, TemplateDataInvalid
    │   ├── RenderResourceExceeded     time, memory or output size limit of the render child
    │   ├── RenderCrashed              the render process died without an answer (retryable)
    │   └── EngineError                an unexpected exception inside an engine (a bug, not a limit)
    ├── InternalError                  an exception nobody expected, outside an engine (carries an error id)
    ├── ProviderError                  outside renderers (see providers/)
    ├── RequestError                   the service boundary: a caller's request is refused
    │   ├── InvalidRequest, Unauthorized, Forbidden, UploadTooLarge
    │   │   InvalidRequest
    │   │   ├── InvalidWatermark       the watermark spec is malformed (400, names the field)
    │   │   └── InvalidReportData      report data fails its template's schema (400, names the path)
    │   ├── EmptyUpload                the upload has no bytes (400, before any job exists)
    │   ├── UnsupportedUpload          the upload is not a PDF by its first bytes (415)
    │   ├── ArtifactNotReady, ArtifactGone, SignedUrlExpired
    │   └── SignedUrlInvalid
    │       └── SignedUrlRevoked       the key that minted the link was revoked
    └── ApiError                       client side: HTTP answers, poll timeouts
"""

from __future__ import annotations

from typing import Any, ClassVar


class DocfenceError(Exception):
    """docfence failed."""

    code: ClassVar[str] = "internal_error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        doc = (type(self).__doc__ or "").strip().splitlines()
        self.message = message or (doc[0] if doc else self.code)
        #: The request field or setting at fault, as the caller named it (e.g. "deadline_s"), if one is.
        self.field = field
        super().__init__(self.message)


class ConfigError(DocfenceError):
    """The configuration is invalid."""

    code = "config_invalid"


class StoreError(DocfenceError):
    """The job store failed."""

    code = "store_error"


class NotFound(StoreError):
    """No such record."""

    code = "not_found"


class IdempotencyConflict(StoreError):
    """This idempotency key was already used for a different request."""

    code = "idempotency_conflict"


class IllegalTransition(StoreError):
    """That transition is not in the state machine."""

    code = "illegal_transition"


class JobAlreadyEnded(IllegalTransition):
    """The job already ended; there is nothing to cancel."""

    code = "job_already_ended"


class RetryWouldFail(IllegalTransition):
    """The job failed in a way a retry of the same input repeats; a retry is refused."""

    code = "retry_would_fail"


class TemplateIdTaken(StoreError):
    """That template id belongs to another owner."""

    code = "template_id_taken"


class StaleAttempt(StoreError):
    """This attempt is no longer current; its work must be discarded."""

    code = "stale_attempt"


class LeaseLost(StaleAttempt):
    """The lease was lost; nothing may be published."""

    code = "lease_lost"


class StoreUnavailable(StoreError):
    """The job store cannot be reached right now."""

    code = "store_unavailable"
    retryable = True


class StoreConflict(StoreUnavailable):
    """The transaction was rolled back in favour of a concurrent one; nothing was written, retry it."""

    code = "store_conflict"


class BlobError(DocfenceError):
    """Artifact storage failed."""

    code = "storage_error"
    retryable = True


class BlobNotFound(BlobError):
    """No such object in storage."""

    code = "object_not_found"
    retryable = False


class BlobIntegrityError(BlobError):
    """The stored object does not match its recorded sha256."""

    code = "object_integrity"
    retryable = False


class StorageFull(BlobError):
    """No space left in artifact storage."""

    code = "storage_full"
    retryable = True  # an outage of the storage, not of the document: retried over the deadline


class RegionNotApproved(DocfenceError):
    """That region is not approved for storage."""

    code = "region_not_approved"


class DocumentError(DocfenceError):
    """The document cannot be processed."""

    code = "document_error"


class NotAPdf(DocumentError):
    """The input is not a PDF file."""

    code = "not_a_pdf"


class MalformedPdf(DocumentError):
    """The PDF is damaged beyond safe repair."""

    code = "malformed_pdf"


class NoPages(DocumentError):
    """The PDF has no pages to process."""

    code = "no_pages"


class PageTreeInvalid(DocumentError):
    """The PDF page tree is invalid (for example it loops)."""

    code = "page_tree_invalid"


class CorruptContent(DocumentError):
    """A page's content stream, or stream data a page uses, is corrupt; the page cannot be reproduced
    faithfully."""

    code = "corrupt_content"


class PasswordRequired(DocumentError):
    """The PDF is encrypted and needs a password to open: submit it again with its password (form field `password`, `docfence submit --password-file`, the client's `password=`)."""  # noqa: E501

    code = "password_required"


class InvalidPassword(DocumentError):
    """The password given does not open the PDF."""

    code = "invalid_password"


class EncryptionForbidsModification(DocumentError):
    """The PDF's permissions forbid modification, and the policy does not allow overriding them."""

    code = "permissions_forbid_modification"


class OverLimits(DocumentError):
    """The document exceeds a configured limit."""

    code = "over_limits"


class UnsupportedFeature(DocumentError):
    """The document uses a feature docfence cannot process faithfully."""

    code = "unsupported_feature"


class ActiveContentRefused(DocumentError):
    """The document holds active content (scripts, actions, embedded files) its class refuses."""

    code = "active_content_refused"


class FormTreeInvalid(DocumentError):
    """The PDF's form field tree loops or shares a field between parents, so readers may never finish it."""

    code = "form_tree_invalid"


class ResourceCycle(DocumentError):
    """A form, pattern or Type3 font in the PDF draws itself, so rendering it would never end."""

    code = "resource_cycle"


class ValidationFailed(DocumentError):
    """The output failed its fidelity validation and was not published."""

    code = "validation_failed"

    def __init__(self, message: str | None = None, *, report: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.report = report  # the validation report: which check failed on which pages


class SigningRefused(DocumentError):
    """The class signs its outputs, and an encrypted output is never signed (see docs/verification.md)."""

    code = "signing_refused"


class TemplateError(DocumentError):
    """The report template cannot be rendered."""

    code = "template_error"


class TemplateDataInvalid(DocumentError):
    """The report data does not match the template's schema."""

    code = "template_data_invalid"


class RenderResourceExceeded(DocumentError):
    """Rendering exceeded its time, memory or output-size limit."""

    code = "render_resource_exceeded"


class RenderCrashed(DocumentError):
    """The render process died without an answer."""

    code = "render_crashed"
    retryable = True  # a signal or a crash of this process, not necessarily of this document


class EngineError(DocumentError):
    """The engine failed unexpectedly on this document."""

    code = "engine_error"  # same bytes, same policy, same failure: retrying would not help


class InternalError(DocfenceError):
    """An unexpected error; its error id names the traceback in the log."""

    code = "internal_error"

    def __init__(self, message: str | None = None, *, error_id: str | None = None) -> None:
        #: Names the logged traceback (never shown with it in a public message).
        self.error_id = error_id
        super().__init__(message)


class ProviderError(DocfenceError):
    """An outside renderer failed."""

    code = "provider_error"


class RequestError(DocfenceError):
    """The request cannot be served as asked."""

    code = "request_error"


class InvalidRequest(RequestError):
    """The request is invalid."""

    code = "invalid_request"


class InvalidWatermark(InvalidRequest):
    """The watermark spec is malformed."""

    code = "invalid_watermark"


class InvalidReportData(InvalidRequest):
    """The report data does not match the template's JSON Schema."""

    code = "invalid_report_data"


class EmptyUpload(RequestError):
    """The upload is empty; no job was created."""

    code = "empty_upload"


class UnsupportedUpload(RequestError):
    """The upload is not a PDF (no %PDF- header in its first 1024 bytes); no job was created."""

    code = "unsupported_media_type"


class Unauthorized(RequestError):
    """A valid API key is required."""

    code = "unauthorized"


class Forbidden(RequestError):
    """This API key lacks the scope for that operation."""

    code = "forbidden"


class UploadTooLarge(RequestError):
    """The upload exceeds the maximum size; nothing was stored."""

    code = "upload_too_large"


class ArtifactNotReady(RequestError):
    """The job has no downloadable artifact (it has not succeeded)."""

    code = "artifact_not_ready"


class ArtifactGone(RequestError):
    """The artifact was deleted."""

    code = "artifact_gone"


class SignedUrlInvalid(RequestError):
    """The download link is invalid."""

    code = "signed_url_invalid"


class SignedUrlRevoked(SignedUrlInvalid):
    """The API key that created this download link was revoked."""

    code = "signed_url_revoked"


class SignedUrlExpired(RequestError):
    """The download link has expired."""

    code = "signed_url_expired"


class ApiError(DocfenceError):
    """The docfence API answered with an error."""

    code = "api_error"


def all_codes() -> dict[str, str]:
    """Every stable error code with its default message (published by /v1/capabilities)."""
    out: dict[str, str] = {}
    stack: list[type[DocfenceError]] = [DocfenceError]
    while stack:
        cls = stack.pop()
        doc = (cls.__doc__ or "").strip().splitlines()
        out.setdefault(cls.code, doc[0] if doc else cls.code)  # never instantiated: no required args
        stack.extend(cls.__subclasses__())
    return dict(sorted(out.items()))
