"""The schema on both stores: a store reports the newest migration applied and the newest this code
ships, and a database one migration behind reads as behind until `migrate()` catches it up; and the
current readers tolerate what the next release's expand migration may add (docs/deploy.md)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import psycopg
import pytest

from docfence.core.errors import StoreConflict
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, NewJob
from docfence.store import postgres as pg_module
from docfence.store import sqlite as sqlite_module
from docfence.store.base import open_store
from docfence.store.postgres import PostgresStore
from docfence.store.queries import migrations
from docfence.store.sqlite import SqliteStore
from docfence.testing.stores import temporary_pg_database


@contextmanager
def store_one_migration_behind(kind: str, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> Iterator[SqliteStore | PostgresStore]:
    """A fresh database migrated by the store's own `migrate()` up to the migration before the newest
    (the code of the release before), then handed over with the full list of migrations restored."""
    module = sqlite_module if kind == "sqlite" else pg_module
    dialect = "sqlite" if kind == "sqlite" else "postgres"
    with monkeypatch.context() as patch:
        patch.setattr(module, "migrations", lambda _dialect: migrations(dialect)[:-1])
        if kind == "sqlite":
            store: SqliteStore | PostgresStore = SqliteStore(tmp_path / "behind.db")
            store.migrate()
            yield from _handed_over(store, patch)
            return
        with temporary_pg_database("docfence_behind") as url:
            store = PostgresStore(url)
            store.migrate()
            yield from _handed_over(store, patch)


def _handed_over(store: SqliteStore | PostgresStore,
                 patch: pytest.MonkeyPatch) -> Iterator[SqliteStore | PostgresStore]:
    patch.undo()  # the store now runs as the current code: it ships every migration
    try:
        yield store
    finally:
        store.close()


class TestSchemaVersion:
    """Run over both dialects by the `store` / `store_kind` fixtures (tests/conftest.py)."""

    def test_a_migrated_store_is_at_the_newest_migration_it_ships(self, store) -> None:  # type: ignore[no-untyped-def]
        newest = migrations(store.dialect)[-1][0]
        assert newest == len(migrations(store.dialect)) > 1
        assert store.schema_versions() == (newest, newest)
        assert store.migrate() == []  # nothing pending, and the read is unchanged by a no-op migrate
        assert store.schema_versions() == (newest, newest)

    def test_a_database_one_migration_behind_reads_behind_until_migrated(
        self, store_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with store_one_migration_behind(store_kind, tmp_path, monkeypatch) as store:
            number, name, _ = migrations(store.dialect)[-1]
            assert store.schema_versions() == (number - 1, number)
            assert store.migrate() == [f"{number:03d}_{name}"]
            assert store.schema_versions() == (number, number)


# -- the current version as the next rollout's old one --------------------------------------------
def _reads(store: Any, ids: Sequence[str], key_id: str) -> list[Any]:
    """Every read that maps stored rows: jobs, attempts, artifacts, audit events, API keys."""
    return [store.get(ids[0]), store.list_jobs(tenant="t1", limit=10), store.get_api_key(key_id),
            *[(store.attempts(i), store.artifact(i), store.audit_events(i)) for i in ids]]


def _add_a_column_to_every_table(kind: str, url: str) -> int:
    """What the next release's expand migration may do to any table: add a nullable column."""
    if kind == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as lite:
            tables = [r[0] for r in lite.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
            for table in tables:
                lite.execute(f'ALTER TABLE "{table}" ADD COLUMN next_release_probe TEXT')
        return len(tables)
    with psycopg.connect(url, autocommit=True) as pg:
        tables = [r[0] for r in pg.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            "AND table_type = 'BASE TABLE'")]
        for table in tables:
            pg.execute(f'ALTER TABLE "{table}" ADD COLUMN next_release_probe TEXT')
    return len(tables)


def _reads_after_a_schema_change(store: Any, ids: Sequence[str], key_id: str) -> list[Any]:
    """`_reads`, where each prepared statement of a PostgreSQL session may answer StoreConflict (retry:
    nothing was written) once, as it re-plans for the changed table; any other error fails."""
    for _ in range(20):
        try:
            return _reads(store, ids, key_id)
        except StoreConflict:
            continue
    raise AssertionError("the reads kept conflicting after the schema change")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_current_readers_tolerate_the_next_release_s_columns(kind: str, tmp_path: Path) -> None:
    """The rule's other half, for the current code as the next rollout's old version: after a column is
    added to every table under a running store (same connections, statements already prepared), every
    read that maps rows answers as before."""
    with temporary_pg_database("docfence_expand") if kind == "postgres" else nullcontext(
            f"sqlite:///{tmp_path}/expand.db") as url:
        store = open_store(url)
        try:
            ids = []
            for outcome in ("succeeded", "failed"):
                job, _ = store.submit(NewJob(tenant="t1", policy=JobPolicy()))
                claim = store.claim("w1")[0]
                if outcome == "succeeded":
                    info = ArtifactInfo(f"jobs/t1/{job.id}/artifact/1.pdf", "0" * 64, 10, 1, {"ok": True})
                    store.complete(job.id, claim.attempt, "w1", info)
                else:
                    store.fail(job.id, claim.attempt, "w1", "validation_failed", "a check failed",
                               retryable=False, validation='{"checks": []}')
                ids.append(job.id)
            store.insert_api_key("k1", tenant="t1", name="probe", scopes=("read",), key_hash="0" * 64,
                                 actor="test")
            before = [_reads(store, ids, "k1") for _ in range(6)][-1]  # PostgreSQL prepares repeated queries
            assert _add_a_column_to_every_table(kind, url) >= 10
            assert _reads_after_a_schema_change(store, ids, "k1") == before
        finally:
            store.close()
