"""The Python client of the docfence API: `DocfenceClient` with bounded `wait()` and verified downloads.

Imports only core and its own wire models, so it can ship without the server.
"""

from __future__ import annotations

from docfence.client.errors import (
    ArtifactMissing,
    Conflict,
    DownloadIntegrityError,
    Forbidden,
    Gone,
    HttpError,
    InvalidRequest,
    JobCanceled,
    JobFailed,
    JobNotFound,
    PayloadTooLarge,
    PollTimeout,
    ServerError,
    TransportError,
    Unauthorized,
    UnknownState,
    UnsupportedMediaType,
)
from docfence.client.http import DocfenceClient
from docfence.client.models import ArtifactView, BatchItemView, BatchView, JobPage, JobView

__all__ = [
    "ArtifactMissing",
    "ArtifactView",
    "BatchItemView",
    "BatchView",
    "Conflict",
    "DocfenceClient",
    "DownloadIntegrityError",
    "Forbidden",
    "Gone",
    "HttpError",
    "InvalidRequest",
    "JobCanceled",
    "JobFailed",
    "JobNotFound",
    "JobPage",
    "JobView",
    "PayloadTooLarge",
    "PollTimeout",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "UnknownState",
    "UnsupportedMediaType",
]
