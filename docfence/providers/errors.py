"""Errors of outside renderers, under core's ProviderError. Each has a stable `code`; its docstring is
the default message. Messages never carry payloads, API keys or result URLs.

    ProviderError (core)
    ├── ProviderRejected           the provider refused the request (4xx)
    ├── ProviderUnavailable        5xx / transport trouble beyond the bounded retries
    ├── ProviderMalformed          an answer that cannot be understood
    ├── ProviderHttpError          a status request answered with a non-retryable HTTP error
    ├── ProviderJobFailed          the provider declared the job failed or canceled
    ├── ProviderUnknownStatus      a status value the config does not classify
    ├── ProviderDeadlineExceeded   still running when the poll deadline passed
    └── ProviderDownloadFailed     the result could not be fetched
        └── ProviderRedirectRefused  unsafe or too many redirects
"""

from __future__ import annotations

from docfence.core.errors import ProviderError


class ProviderRejected(ProviderError):
    """The provider rejected the request."""

    code = "provider_rejected"


class ProviderUnavailable(ProviderError):
    """The provider cannot be reached or keeps failing right now."""

    code = "provider_unavailable"
    retryable = True


class ProviderMalformed(ProviderError):
    """The provider answered with something that cannot be understood."""

    code = "provider_malformed"


class ProviderHttpError(ProviderError):
    """The provider answered a status request with a non-retryable HTTP error."""

    code = "provider_http_error"


class ProviderJobFailed(ProviderError):
    """The provider declared the job failed."""

    code = "provider_failed"


class ProviderUnknownStatus(ProviderError):
    """The provider reported a status this integration does not classify."""

    code = "provider_unknown_status"


class ProviderDeadlineExceeded(ProviderError):
    """The provider job was still running when the poll deadline passed."""

    code = "provider_deadline"


class ProviderDownloadFailed(ProviderError):
    """The provider's result could not be downloaded."""

    code = "provider_download_failed"


class ProviderRedirectRefused(ProviderDownloadFailed):
    """The result redirect was unsafe (bad scheme, downgrade, missing target or too many hops)."""

    code = "provider_redirect_refused"
