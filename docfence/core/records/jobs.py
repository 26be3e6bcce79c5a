"""Job records: submissions, jobs, claims, artifacts, attempts, audit events, API keys and pauses."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from docfence.core.policy import JobPolicy
from docfence.core.states import JobState


@dataclass(frozen=True)
class NewJob:
    """What a caller submits. The store freezes `policy` on the job and derives deadline/retention."""

    tenant: str
    policy: JobPolicy
    input_key: str | None = None
    input_sha256: str | None = None
    input_bytes: int | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None  # identifies "the same request" for idempotency
    parent_job_id: str | None = None  # operator retry: the failed job this one replaces
    report_request_id: str | None = None
    actor: str = "system"
    job_id: str | None = None  # pre-chosen id (so the input can be stored under it first)
    label: str | None = None  # the caller's own tag, searchable; never logged
    filename: str | None = None  # the upload's original name (no folders); never logged
    sealed_password: bool = False  # the PDF password is sealed beside the input (never in the row)
    # its data key, wrapped (docs/encryption.md); all None: stored in plaintext (a report snapshot)
    data_key_provider: str | None = None
    data_key_kek_id: str | None = None
    data_key_wrapped: str | None = field(default=None, repr=False)  # base64 of the wrapped bytes


@dataclass(frozen=True)
class Job:
    """The job row. Owner: the rendering service. Deletion: bytes go, the row stays as a tombstone."""

    id: str
    tenant: str
    kind: str
    document_class: str
    mode: str
    region: str
    policy: JobPolicy
    state: JobState
    attempt: int
    max_attempts: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    heartbeat_at: datetime | None
    deadline_at: datetime
    run_after: datetime
    retention_until: datetime
    last_error_code: str | None
    last_error_message: str | None
    idempotency_key: str | None
    request_hash: str | None
    input_key: str | None
    input_sha256: str | None
    input_bytes: int | None
    parent_job_id: str | None
    report_request_id: str | None
    created_at: datetime
    updated_at: datetime
    claimed_at: datetime | None
    finished_at: datetime | None
    deleted_at: datetime | None
    deletion_request_id: str | None
    label: str | None = None  # the caller's tag (searchable within the tenant); never logged
    filename: str | None = None  # the upload's original name; never logged
    sealed_password: bool = False  # its PDF password is sealed beside its input (blobs/sealed.py)
    # Envelope encryption (docs/encryption.md): which key provider and key-encryption key wrapped the
    # job's data key, and the wrapped key (base64). Provider None: a job stored before encryption, its
    # objects plaintext. Provider set and wrapped None: the key was destroyed (deletion).
    data_key_provider: str | None = None
    data_key_kek_id: str | None = None
    data_key_wrapped: str | None = field(default=None, repr=False)

    @property
    def encrypted(self) -> bool:
        """Whether the job's objects are sealed (its row says so; the bytes are never sniffed)."""
        return self.data_key_provider is not None

    @property
    def terminal(self) -> bool:
        return self.state.terminal


def key_fingerprint(provider: str, key_id: str) -> str:
    """32 hex characters naming a key-encryption key in audit events and `inspect`, never the key itself
    (and not its id, which may be an ARN naming an account)."""
    return hashlib.sha256(f"docfence-kek\0{provider}\0{key_id}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Claim:
    """A lease one worker holds on one attempt of one job."""

    job: Job
    attempt: int
    worker: str
    lease_expires_at: datetime


@dataclass(frozen=True)
class ArtifactInfo:
    """What a fenced commit publishes. `key` must be specific to (job, attempt)."""

    key: str
    sha256: str
    bytes: int
    pages: int
    validation: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Completion:
    """One attempt's success handed to a batched fenced commit (`Store.complete_many`)."""

    job_id: str
    attempt: int
    artifact: ArtifactInfo


@dataclass(frozen=True)
class Artifact:
    job_id: str
    attempt: int
    key: str
    sha256: str
    bytes: int
    pages: int
    validation: dict[str, Any]
    created_at: datetime
    deleted_at: datetime | None


@dataclass(frozen=True)
class Attempt:
    """One row per attempt; evidence is never overwritten."""

    job_id: str
    attempt: int
    worker: str
    claimed_at: datetime
    ended_at: datetime | None
    outcome: str | None  # the Event value that ended it
    error_code: str | None
    validation: str | None = None  # JSON text: the report of an attempt that failed validation

    @property
    def validation_report(self) -> dict[str, Any] | None:
        """The kept validation report of this attempt (failed validation only), else None."""
        if not self.validation:
            return None
        report = json.loads(self.validation)
        return report if isinstance(report, dict) else None


def failed_validation(attempts: Sequence[Attempt]) -> dict[str, Any] | None:
    """The validation report that explains the job's last failure: the newest attempt's, with its
    attempt number, when that attempt failed validation; None otherwise (an earlier attempt's report
    stays on its own row, shown with the attempt history)."""
    if not attempts:
        return None
    newest = max(attempts, key=lambda a: a.attempt)
    report = newest.validation_report
    return None if report is None else {"attempt": newest.attempt, **report}


@dataclass(frozen=True)
class AuditEvent:
    """Append-only; written in the transaction of the change it records. Never document content."""

    seq: int
    chain: str  # the job id, or a named chain for events without a job
    chain_seq: int
    job_id: str | None
    attempt: int | None
    actor: str
    action: str  # an Event value, or an operation such as "download" or "delete"
    from_state: str | None
    to_state: str | None
    reason: str | None
    at: datetime
    details: dict[str, Any]
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class ApiKey:
    """An API key record; only the hash of the secret is ever stored."""

    id: str
    tenant: str
    name: str
    scopes: tuple[str, ...]
    key_hash: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class ClaimPause:
    """A pause of new claims (scope `all` or one mode): who paused, when and why; resuming removes it
    (the audit trail keeps both)."""

    scope: str
    paused_at: datetime
    actor: str
    reason: str | None
