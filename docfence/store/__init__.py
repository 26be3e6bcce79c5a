"""The job store: the only package with SQL. `open_store(url)` picks SQLite or PostgreSQL and hands out
the concrete store; components are typed against its capability protocols (store/base.py)."""

from docfence.store.base import (
    AuditLog,
    JobStore,
    KeyStore,
    OpsStore,
    ProviderStore,
    ReportStore,
    Store,
    StoreLifecycle,
    WebhookStore,
    open_store,
)

__all__ = [
    "AuditLog", "JobStore", "KeyStore", "OpsStore", "ProviderStore", "ReportStore", "Store",
    "StoreLifecycle", "WebhookStore", "open_store",
]
