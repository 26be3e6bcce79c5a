"""Store factories for tests: a fresh SQLite file, or a throwaway PostgreSQL database per session."""

from __future__ import annotations

from pathlib import Path

from docfence.core.clock import Clock
from docfence.harness.databases import pg_url_for, temporary_pg_database
from docfence.store.postgres import PostgresStore
from docfence.store.sqlite import SqliteStore


def sqlite_store(path: Path, clock: Clock | None = None) -> SqliteStore:
    store = SqliteStore(path, clock=clock)
    store.migrate()
    return store


def postgres_store(url: str, clock: Clock | None = None) -> PostgresStore:
    store = PostgresStore(url, clock=clock)
    store.migrate()
    return store


__all__ = ["pg_url_for", "postgres_store", "reset", "sqlite_store", "temporary_pg_database"]


def reset(store: SqliteStore | PostgresStore) -> None:
    """Empty every table (between tests or hypothesis examples)."""
    store.run_script("truncate_all")
