"""The store's capabilities as narrow protocols (jobs, audit, operations, keys, reports, providers,
webhooks, wake-ups, lifecycle), and `open_store(url)`, which hands out the concrete store (SQLite or
PostgreSQL) that implements them all. Each component is typed against the protocols it uses."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from docfence.core.clock import Clock
from docfence.core.errors import ConfigError, IdempotencyConflict
from docfence.core.records import (
    ApiKey,
    Artifact,
    ArtifactInfo,
    Attempt,
    AttemptResult,
    AuditEvent,
    Claim,
    ClaimPause,
    Completion,
    DeliveryClaim,
    Job,
    NewJob,
    ProviderObservation,
    ReportRequest,
    Schedule,
    TemplateInfo,
    TemplateVersion,
    WebhookActivity,
    WebhookEndpoint,
)
from docfence.core.states import JobState
from docfence.store.data_keys import StoredDataKey
from docfence.store.passes import HolderVerdict, PassResult, RowLockHolder
from docfence.store.reports import ALL_TENANTS
from docfence.store.sqlstore import SqlStore
from docfence.store.wakeups import Wakeups


class StoreLifecycle(Protocol):
    """Opening, migrating and closing a store, and what callers must know of its dialect."""

    dialect: str
    #: How many write transactions one process should run at once (SQLite: 1, it has one writer).
    write_slots: int

    def migrate(self) -> list[str]: ...
    def schema_versions(self) -> tuple[int, int]:
        """(applied, known): the newest migration applied, the newest this code ships."""
    def close(self) -> None: ...


class JobStore(Protocol):
    """Jobs through their life: every state change is a fenced, audited transition in one transaction.

    Fenced writes raise StaleAttempt (or LeaseLost) when zero rows match: the caller discards its work.
    Transitions that queue or end jobs wake the waiters of `Wakeups` once they commit. `now()` is the
    store's clock, the one leases and deadlines are compared with.
    """

    def now(self) -> datetime: ...
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
        self, job_id: str, attempt: int, worker: str, code: str, message: str, *, retryable: bool,
        validation: str | None = None,
    ) -> Job:
        """`validation`: the failed attempt's validation report (bounded JSON text), kept on its
        attempt row in the same transaction."""
    def release(self, job_id: str, attempt: int, worker: str) -> Job: ...
    def cancel(self, job_id: str, *, actor: str, reason: str = "cancel_requested",
               note: str | None = None) -> Job:
        """`reason` is the audit event's code; `note` the caller's free-text why (details.note)."""
    def get(self, job_id: str) -> Job: ...
    def list_jobs(
        self, *, state: JobState | None = None, tenant: str | None = None, mode: str | None = None,
        document_class: str | None = None, created_before: datetime | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None, created_after: datetime | None = None,
        label: str | None = None, filename: str | None = None,
    ) -> list[Job]: ...
    def attempts(self, job_id: str) -> list[Attempt]: ...
    def artifact(self, job_id: str) -> Artifact | None: ...


class AuditLog(Protocol):
    """The append-only, hash-chained audit trail: one chain per job plus named chains."""

    def record_event(
        self, action: str, *, actor: str, job_id: str | None = None, reason: str | None = None,
        details: dict[str, Any] | None = None, chain: str = "operations",
    ) -> AuditEvent: ...
    def audit_events(self, job_id: str) -> list[AuditEvent]: ...
    def audit_trail(self, *, after_seq: int = 0, limit: int = 1000) -> list[AuditEvent]: ...
    def iter_audit(self, *, page: int = 1000) -> Iterator[AuditEvent]: ...
    def audit_heads(self) -> dict[str, tuple[int, str]]: ...


class OpsStore(Protocol):
    """Operating the queue: claim pauses, class modes, lease and state counts, the reconciler's passes
    (expired leases, deadlines; the rows they skip for a lock and their escalation), retention and bytes
    deletion (tombstones). Changes are audited."""

    def pause_claims(self, scope: str, *, actor: str, reason: str | None = None) -> None: ...
    def resume_claims(self, scope: str, *, actor: str, reason: str | None = None) -> None: ...
    def paused_scopes(self) -> list[str]: ...
    def claim_pauses(self) -> list[ClaimPause]: ...
    def valid_lease_count(self, *, mode: str | None = None) -> int: ...
    def count_by_state(self) -> dict[str, int]: ...
    def set_class_mode(self, document_class: str, mode: str, *, actor: str) -> None: ...
    def class_modes(self) -> dict[str, str]: ...
    def requeue_expired(self, *, batch: int = 100) -> list[Job]: ...
    def cancel_past_deadline(self, *, batch: int = 100) -> list[Job]: ...
    def requeue_expired_pass(self, *, batch: int = 100) -> PassResult:
        """requeue_expired, also answering the due rows it skipped because another session locked them."""
    def cancel_past_deadline_pass(self, *, batch: int = 100) -> PassResult: ...
    def escalate_expired_lease(self, job_id: str, attempt: int, *, lock_timeout_s: float) -> Job | None:
        """Move one skipped expired lease, waiting up to `lock_timeout_s` for its row lock."""
    def escalate_past_deadline(self, job_id: str, attempt: int, *, lock_timeout_s: float) -> Job | None: ...
    def row_lock_holders(self, job_id: str) -> list[RowLockHolder]:
        """The sessions holding the job's row lock now (PostgreSQL; always empty on SQLite)."""
    def terminate_expired_lease_holders(self, job_id: str, attempt: int, *,
                                        wait_s: float) -> list[HolderVerdict]:
        """End docfence's own sessions holding a still-expired lease's row lock; others are answered."""
    def terminate_past_deadline_holders(self, job_id: str, attempt: int, *,
                                        wait_s: float) -> list[HolderVerdict]: ...
    def tombstone(self, job_id: str, *, actor: str, request_id: str | None, reason: str,
                  note: str | None = None) -> Job: ...
    def retention_due(self, *, batch: int = 100) -> list[str]: ...


class KeyStore(Protocol):
    """API keys: hashes only, never the secret; creation and revocation are audited."""

    def insert_api_key(
        self, key_id: str, *, tenant: str, name: str, scopes: tuple[str, ...], key_hash: str, actor: str
    ) -> ApiKey: ...
    def get_api_key(self, key_id: str) -> ApiKey | None: ...
    def revoke_api_key(self, key_id: str, *, actor: str) -> ApiKey: ...
    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]: ...


class DataKeyStore(Protocol):
    """Jobs' wrapped data keys after a key-encryption key rotation: the rows still under an older key,
    a fenced replacement of one row's wrapped key (False: destroyed or re-wrapped meanwhile), and how
    many live wrapped keys each (provider, key id) holds."""

    def rewrap_due(self, provider: str, kek_id: str, *, after: str = "", limit: int = 100
                   ) -> list[StoredDataKey]: ...
    def replace_wrapped_key(self, job_id: str, *, old: str, provider: str, kek_id: str, wrapped: str
                            ) -> bool: ...
    def count_data_keys(self) -> dict[tuple[str, str], int]: ...


class ReportStore(Protocol):
    """The report pipeline's records: immutable template versions, report requests (and their
    corrections), monthly schedules, and the jobs of a request. Changes are audited ("reports" chain).
    `visible_to` of template reads: ALL_TENANTS, a tenant, or None (shared templates only)."""

    def insert_template_version(
        self, template_id: str, *, name: str, sha256: str, html: str, css: str, assets: dict[str, str],
        schema: dict[str, Any], actor: str, owner: str | None = None,
    ) -> TemplateVersion: ...
    def get_template(self, template_id: str, version: int | None = None, *,
                     visible_to: str | None = ALL_TENANTS) -> TemplateVersion: ...
    def list_templates(self, template_id: str | None = None, *, visible_to: str | None = ALL_TENANTS,
                       limit: int = 500) -> list[TemplateInfo]: ...
    def insert_report_request(
        self, *, actor: str, retention_s: float, watermark: dict[str, Any] | None = None, **fields: Any
    ) -> tuple[ReportRequest, bool]: ...
    def supersede_report_request(
        self, old: ReportRequest, *, actor: str, retention_s: float, reason: str,
        watermark: dict[str, Any] | None = None, **fields: Any,
    ) -> tuple[ReportRequest, bool]: ...
    def get_report_request(self, request_id: str) -> ReportRequest: ...
    def list_report_requests(self, tenant: str, *, limit: int = 100) -> list[ReportRequest]: ...
    def request_jobs(self, request_id: str) -> list[Job]: ...
    def insert_schedule(self, *, actor: str, **fields: Any) -> tuple[Schedule, bool]: ...
    def get_schedule(self, schedule_id: str) -> Schedule: ...
    def list_schedules(self, tenant: str | None = None) -> list[Schedule]: ...
    def advance_schedule(
        self, schedule_id: str, period: str, *, actor: str, request_id: str | None = None,
        skipped: Sequence[str] = (),
    ) -> bool: ...


class ProviderStore(Protocol):
    """Report jobs rendered by an outside provider: their fenced claim and the observations of each
    polling pass (the last status, when it was seen, how polling ended)."""

    def claim_provider_jobs(
        self, worker: str, processors: Sequence[str], *, limit: int = 1
    ) -> list[Claim]: ...
    def record_provider_observation(
        self, job_id: str, attempt: int, worker: str, *, provider: str, kind: str,
        provider_job_id: str | None = None, status: str | None = None, http_status: int | None = None,
        reason: str | None = None, observed_at: datetime | None = None,
    ) -> ProviderObservation: ...
    def finish_provider_observation(
        self, job_id: str, attempt: int, worker: str, outcome: str, *, details: dict[str, Any]
    ) -> None: ...
    def provider_observation(self, job_id: str) -> ProviderObservation | None: ...


class WebhookStore(Protocol):
    """Webhook endpoints per tenant and fenced delivery attempts of the outbox events that terminal
    transitions wrote (claimed and finished the way jobs are: attempt += 1, outcome fenced); finished
    events are pruned after a while (their attempts stay on the jobs' audit chains)."""

    def insert_webhook_endpoint(
        self, endpoint_id: str, *, tenant: str, url: str, events: tuple[str, ...], secret: str,
        description: str | None, actor: str,
    ) -> WebhookEndpoint: ...
    def get_webhook_endpoint(self, endpoint_id: str) -> WebhookEndpoint: ...
    def list_webhook_endpoints(self, tenant: str | None = None) -> list[WebhookEndpoint]: ...
    def disable_webhook_endpoint(self, endpoint_id: str, *, tenant: str, actor: str) -> WebhookEndpoint: ...
    def rotate_webhook_secret(
        self, endpoint_id: str, *, tenant: str, secret: str, grace_s: float, actor: str
    ) -> WebhookEndpoint: ...
    def claim_webhook_deliveries(self, worker: str, *, limit: int, lease_s: float) -> list[DeliveryClaim]: ...
    def finish_webhook_delivery(
        self, claim: DeliveryClaim, result: AttemptResult, *, to_state: str, delay_s: float = 0.0,
        reason: str | None = None,
    ) -> bool: ...
    def fail_overdue_webhook_deliveries(
        self, *, deadline_s: float, limit: int = 100
    ) -> list[tuple[str, str]]: ...
    def prune_webhook_events(self, *, keep_s: float, limit: int = 100) -> list[str]: ...
    def webhook_deliveries_due(self) -> bool: ...
    def webhook_activity(self, job_id: str) -> WebhookActivity: ...
    def count_webhook_deliveries(self) -> dict[str, int]: ...


#: The concrete store the composition root (open_store, the runtime, tests) hands out; it implements
#: every protocol above. Components take the narrowest protocol(s) they use, never this.
Store = SqlStore


def open_store(url: str, *, clock: Clock | None = None, migrate: bool = True,
               application_name: str = "docfence") -> SqlStore:
    """`sqlite:///path/to/file.db` or `postgresql://user@host:port/db`. Migrates by default.
    `application_name` names the caller's role on PostgreSQL sessions (docfence-worker, docfence-api,
    docfence-reconciler; SQLite has no sessions to name)."""
    store: SqlStore
    if url.startswith("sqlite:"):
        from docfence.store.sqlite import SqliteStore

        store = SqliteStore(_sqlite_path(url), clock=clock)
    elif url.startswith(("postgresql:", "postgres:")):
        from docfence.store.postgres import PostgresStore

        store = PostgresStore(url, clock=clock, application_name=application_name)
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


if TYPE_CHECKING:  # mypy proves that the concrete store implements every capability protocol
    def _implements_every_capability(store: SqlStore) -> tuple[
        StoreLifecycle, JobStore, AuditLog, OpsStore, KeyStore, ReportStore, ProviderStore, WebhookStore,
        Wakeups, DataKeyStore,
    ]:
        return store, store, store, store, store, store, store, store, store, store
