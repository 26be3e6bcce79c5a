"""Store factories for tests: a fresh SQLite file, or a throwaway PostgreSQL database per session; and
the ways to provoke a store's errors for real on each dialect (held locks, an unreachable database,
a full disk)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from docfence.core.clock import Clock
from docfence.core.errors import StoreError
from docfence.harness.databases import pg_url_for, temporary_pg_database
from docfence.store.pg_session import SessionLimits
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


# -- provoking the store's errors for real, per dialect (store_errors_contract.py) -------------------
def with_lock_bound(store: SqliteStore | PostgresStore, seconds: float) -> SqliteStore | PostgresStore:
    """Another store on the same database whose writers wait at most `seconds` for a lock (SQLite's
    busy timeout, PostgreSQL's lock_timeout)."""
    if isinstance(store, SqliteStore):
        return SqliteStore(store.path, clock=store.clock, busy_timeout_s=seconds)
    return PostgresStore(store.url, clock=store.clock, limits=SessionLimits(lock_timeout_s=seconds))


@contextmanager
def holding_job_row(store: SqliteStore | PostgresStore, job_id: str) -> Iterator[None]:
    """Another client holds what a write of this job needs, until the block ends: SQLite's one write
    lock (BEGIN IMMEDIATE), or the job's row lock on PostgreSQL."""
    if isinstance(store, SqliteStore):
        lite = sqlite3.connect(store.path, isolation_level=None)
        try:
            lite.execute("BEGIN IMMEDIATE")
            yield
            lite.execute("ROLLBACK")
        finally:
            lite.close()
        return
    with psycopg.connect(store.url, autocommit=True, application_name="other-client") as pg:
        pg.execute("BEGIN")
        pg.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
        yield
        pg.execute("ROLLBACK")


def unreachable(store: SqliteStore | PostgresStore, folder: Path) -> SqliteStore | PostgresStore:
    """A store of the same dialect whose database cannot be reached: a SQLite "file" that is a folder,
    a PostgreSQL port nobody listens on."""
    if isinstance(store, SqliteStore):
        folder.mkdir(parents=True, exist_ok=True)
        return SqliteStore(folder, clock=store.clock)
    return PostgresStore("postgresql://postgres@127.0.0.1:1/none", clock=store.clock,
                         limits=SessionLimits(connect_timeout_s=2))


@contextmanager
def disk_full(store: SqliteStore | PostgresStore) -> Iterator[bool]:
    """SQLite: the database may not grow by one page (SQLITE_FULL, as a full disk answers), yields True.
    PostgreSQL's disk cannot be filled from a test: yields False (see `disk_full_error`)."""
    if not isinstance(store, SqliteStore):
        yield False
        return
    conn = store._conn()
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    (before,) = conn.execute("PRAGMA max_page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {int(pages)}")
    try:
        yield True
    finally:
        conn.execute(f"PRAGMA max_page_count = {int(before)}")


def disk_full_error(store: SqliteStore | PostgresStore) -> StoreError:
    """What the store makes of its driver's own "disk full" error (its translation table)."""
    if isinstance(store, SqliteStore):
        from docfence.store.sqlite import _translate as lite

        native = sqlite3.OperationalError("database or disk is full")
        native.sqlite_errorcode, native.sqlite_errorname = sqlite3.SQLITE_FULL, "SQLITE_FULL"
        return lite(native)
    from docfence.store.postgres import _translate as pgt

    return pgt(psycopg.errors.DiskFull("could not extend file: No space left on device"), store._conn())[0]
