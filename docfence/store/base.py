"""The narrow Store interface every backend implements, and `open_store(url)` to pick one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol

from docfence.core.clock import Clock
from docfence.core.errors import ConfigError, IdempotencyConflict
from docfence.core.records import (
    ApiKey,
    Artifact,
    ArtifactInfo,
    Attempt,
    AuditEvent,
    Claim,
    ClaimPause,
    Completion,
    Job,
    NewJob,
)
from docfence.core.states import JobState
from docfence.store.sqlstore import SqlStore
from docfence.store.wakeups import Wakeups


class Store(Wakeups, Protocol):
    """Every state change is a fenced, audited transition in one transaction.

    Fenced writes raise StaleAttempt (or LeaseLost) when zero rows match: the caller discards its work.
    Transitions that queue or end jobs wake the waiters of `Wakeups` once they commit.
    """

    dialect: str
    write_slots: int

    def migrate(self) -> list[str]: ...
    def close(self) -> None: ...
    def now(self) -> datetime: ...

    # transitions
    def submit(self, new: NewJob) -> tuple[Job, bool]: ...
    def submit_many(
        self, news: Sequence[NewJob], *, all_or_nothing: bool = True
    ) -> list[tuple[Job, bool] | IdempotencyConflict]: ...
    def claim(self, worker: str, *, limit: int = 1) -> list[Claim]: ...
    def heartbeat(self, job_id: str, attempt: int, worker: str) -> datetime: ...
    def heartbeat_many(
        self, leases: Sequence[tuple[str, int]], worker: str
    ) -> dict[tuple[str, int], datetime]: ...
    def complete(self, job_id: str, attempt: int, worker: str, artifact: ArtifactInfo) -> Job: ...
    def complete_many(
        self, completions: Sequence[Completion], worker: str
    ) -> dict[tuple[str, int], Job]: ...
    def fail(
        self, job_id: str, attempt: int, worker: str, code: str, message: str, *, retryable: bool
    ) -> Job: ...
    def release(self, job_id: str, attempt: int, worker: str) -> Job: ...
    def cancel(self, job_id: str, *, actor: str, reason: str = "cancel_requested",
               note: str | None = None) -> Job:
        """`reason` is the audit event's code; `note` the caller's free-text why (details.note)."""
    def requeue_expired(self, *, batch: int = 100) -> list[Job]: ...
    def cancel_past_deadline(self, *, batch: int = 100) -> list[Job]: ...

    # reads
    def get(self, job_id: str) -> Job: ...
    def list_jobs(
        self, *, state: JobState | None = None, tenant: str | None = None, mode: str | None = None,
        document_class: str | None = None, created_before: datetime | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None, created_after: datetime | None = None,
        label: str | None = None, filename: str | None = None,
    ) -> list[Job]: ...
    def count_by_state(self) -> dict[str, int]: ...
    def request_jobs(self, request_id: str) -> list[Job]: ...
    def attempts(self, job_id: str) -> list[Attempt]: ...
    def artifact(self, job_id: str) -> Artifact | None: ...
    def audit_events(self, job_id: str) -> list[AuditEvent]: ...
    def audit_trail(self, *, after_seq: int = 0, limit: int = 1000) -> list[AuditEvent]: ...
    def iter_audit(self, *, page: int = 1000) -> Iterator[AuditEvent]: ...
    def audit_heads(self) -> dict[str, tuple[int, str]]: ...

    # audit and operations
    def record_event(
        self, action: str, *, actor: str, job_id: str | None = None, reason: str | None = None,
        details: dict[str, Any] | None = None, chain: str = "operations",
    ) -> AuditEvent: ...
    def pause_claims(self, scope: str, *, actor: str, reason: str | None = None) -> None: ...
    def resume_claims(self, scope: str, *, actor: str, reason: str | None = None) -> None: ...
    def paused_scopes(self) -> list[str]: ...
    def claim_pauses(self) -> list[ClaimPause]: ...
    def valid_lease_count(self, *, mode: str | None = None) -> int: ...
    def set_class_mode(self, document_class: str, mode: str, *, actor: str) -> None: ...
    def class_modes(self) -> dict[str, str]: ...

    # deletion and retention
    def tombstone(self, job_id: str, *, actor: str, request_id: str | None, reason: str,
                  note: str | None = None) -> Job: ...
    def retention_due(self, *, batch: int = 100) -> list[str]: ...

    # API keys (hashes only)
    def insert_api_key(
        self, key_id: str, *, tenant: str, name: str, scopes: tuple[str, ...], key_hash: str, actor: str
    ) -> ApiKey: ...
    def get_api_key(self, key_id: str) -> ApiKey | None: ...
    def revoke_api_key(self, key_id: str, *, actor: str) -> ApiKey: ...
    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]: ...


def open_store(url: str, *, clock: Clock | None = None, migrate: bool = True) -> SqlStore:
    """`sqlite:///path/to/file.db` or `postgresql://user@host:port/db`. Migrates by default."""
    store: SqlStore
    if url.startswith("sqlite:"):
        from docfence.store.sqlite import SqliteStore

        store = SqliteStore(_sqlite_path(url), clock=clock)
    elif url.startswith(("postgresql:", "postgres:")):
        from docfence.store.postgres import PostgresStore

        store = PostgresStore(url, clock=clock)
    else:
        raise ConfigError("database URL must start with sqlite:/// or postgresql://")
    if migrate:
        store.migrate()
    return store


def _sqlite_path(url: str) -> str:
    """SQLAlchemy's convention: sqlite:///relative.db and sqlite:////absolute/path.db."""
    if not url.startswith("sqlite:///") or len(url) <= len("sqlite:///"):
        raise ConfigError("sqlite URL needs a file path: sqlite:///relative.db or sqlite:////abs/path.db")
    return url[len("sqlite:///") :]
