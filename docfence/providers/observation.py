"""What one look at a provider job found (`Observation`), classified so the poller never has to read
HTTP details, plus the sink the poller reports every pass to and the safe-text helper for statuses."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

MAX_STATUS_CHARS = 64
MAX_REASON_CHARS = 200


class ObservationKind(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the provider declared failure (or cancellation)
    UNKNOWN_STATUS = "unknown_status"  # a 2xx JSON answer with a status value we do not classify
    MALFORMED = "malformed"  # a 2xx answer that is not the JSON we expect
    HTTP_ERROR = "http_error"  # a non-2xx answer other than 429; see http_status
    RATE_LIMITED = "rate_limited"  # 429; see retry_after_s
    TRANSPORT_ERROR = "transport_error"  # no HTTP answer at all (connect, timeout, reset)


@dataclass(frozen=True)
class Observation:
    """One status request and its classification. `status` and `reason` are truncated, printable-only
    copies of what the provider said; no payload is kept. `result_url` is hidden from repr: it may be
    a signed URL and must never be logged."""

    provider_job_id: str
    kind: ObservationKind
    observed_at: datetime
    status: str | None = None
    http_status: int | None = None
    retry_after_s: float | None = None
    reason: str | None = None
    result_url: str | None = field(default=None, repr=False)


class ObservationSink(Protocol):
    """Receives every observation the poller makes (the store persists last status + time)."""

    def record(self, obs: Observation) -> None: ...


def safe_text(value: Any, limit: int) -> str | None:
    """A short, printable-ASCII rendering of a provider-supplied scalar; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = "".join(ch if " " <= ch <= "~" else "?" for ch in str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."
