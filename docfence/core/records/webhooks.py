"""Webhook records: a tenant's endpoints, leased delivery attempts of outbox events, and what each
attempt observed. Secrets never appear in a record's repr."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class WebhookEndpoint:
    """An endpoint of one tenant. `secret` signs every delivery (shown to its owner once)."""

    id: str
    tenant: str
    url: str
    events: tuple[str, ...]
    description: str | None
    created_at: datetime
    created_by: str
    disabled_at: datetime | None
    secret: str = field(repr=False)
    previous_secret: str | None = field(default=None, repr=False)
    secret_grace_until: datetime | None = None


@dataclass(frozen=True)
class DeliveryClaim:
    """One leased delivery attempt: what to send where, and the secrets that sign it."""

    event_id: str
    endpoint_id: str
    attempt: int
    worker: str
    claimed_at: datetime
    lease_expires_at: datetime
    event_created_at: datetime
    event_type: str
    job_id: str
    job_attempt: int  # the job's attempt whose transition wrote the event
    payload: str
    url: str
    secrets: tuple[str, ...] = field(repr=False)


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt observed; `body_prefix` holds at most 256 bytes of the answer."""

    outcome: str  # delivered | retry | failed
    status_code: int | None = None
    latency_ms: float | None = None
    error: str | None = None
    body_prefix: str | None = None


@dataclass(frozen=True)
class WebhookDelivery:
    event_id: str
    endpoint_id: str
    type: str
    url: str
    state: str
    attempt: int
    last_status: int | None
    failure_reason: str | None
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class WebhookAttempt:
    event_id: str
    endpoint_id: str
    attempt: int
    dispatcher: str
    claimed_at: datetime
    ended_at: datetime | None
    outcome: str | None
    status_code: int | None
    latency_ms: float | None
    error: str | None
    body_prefix: str | None


@dataclass(frozen=True)
class WebhookActivity:
    """A job's outbox events (type and payload by id), their deliveries and every attempt."""

    events: dict[str, tuple[str, str]]
    deliveries: list[WebhookDelivery]
    attempts: list[WebhookAttempt]
