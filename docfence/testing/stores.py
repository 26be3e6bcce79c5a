"""Store factories for tests: a fresh SQLite file, or a throwaway PostgreSQL database per session."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from docfence.core.clock import Clock
from docfence.store.postgres import PostgresStore
from docfence.store.sqlite import SqliteStore

PG_ADMIN_URL = os.environ.get("DOCFENCE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def pg_url_for(dbname: str) -> str:
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{dbname}"


@contextmanager
def temporary_pg_database(prefix: str = "docfence_test") -> Iterator[str]:
    """Create an empty database, yield its URL, drop it afterwards."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_url_for(name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sqlite_store(path: Path, clock: Clock | None = None) -> SqliteStore:
    store = SqliteStore(path, clock=clock)
    store.migrate()
    return store


def postgres_store(url: str, clock: Clock | None = None) -> PostgresStore:
    store = PostgresStore(url, clock=clock)
    store.migrate()
    return store


def reset(store: SqliteStore | PostgresStore) -> None:
    """Empty every table (between tests or hypothesis examples)."""
    store.run_script("truncate_all")
