"""`/readyz` answers ready only when the store answers and its schema is current: a database one
migration behind the server's code answers 503 with a reason naming both schema versions, and 200 once
`docfence db upgrade` (the store's migrate) caught it up. On SQLite and PostgreSQL."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import httpx
import pytest

from docfence.api import create_app
from docfence.config import Settings
from docfence.service import build_service
from docfence.store import postgres as pg_module
from docfence.store import sqlite as sqlite_module
from docfence.store.base import open_store
from docfence.store.queries import migrations
from docfence.testing.servers import running
from docfence.testing.stores import temporary_pg_database


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_database_one_migration_behind_is_not_ready(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with temporary_pg_database("docfence_api_behind") if kind == "postgres" else nullcontext(
            f"sqlite:///{tmp_path}/behind.db") as url:
        _serve_one_migration_behind(url, tmp_path, monkeypatch)


def _serve_one_migration_behind(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Migrate `url` with the store's own migrate() short of the newest migration (as the release before
    would), then serve it with the current code, which never migrates while serving."""
    with monkeypatch.context() as patch:
        for module in (sqlite_module, pg_module):
            patch.setattr(module, "migrations", lambda dialect: migrations(dialect)[:-1])
        store = open_store(url)
    try:
        settings = Settings(database_url=url, storage_url=f"file://{tmp_path}/objects")
        app = create_app(settings, service=build_service(settings, store))
        newest = migrations(store.dialect)[-1][0]
        with running(app) as base, httpx.Client(base_url=base, timeout=30) as http:
            behind = http.get("/readyz")
            assert behind.status_code == 503
            assert behind.json()["status"] == "unavailable"
            reason = behind.json()["reason"]
            assert f"migration {newest - 1}," in reason and f"needs {newest}" in reason
            assert "docfence db upgrade" in reason
            assert http.get("/healthz").status_code == 200  # alive: take it out of traffic, not restart
            store.migrate()
            assert http.get("/readyz").json() == {"status": "ok"}
    finally:
        store.close()


def test_a_database_a_newer_release_migrated_stays_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rolling upgrade migrates first and replaces servers after: the servers of the release before
    see a schema one migration ahead of their code and must keep taking traffic (docs/deploy.md)."""
    url = f"sqlite:///{tmp_path}/ahead.db"
    newest = migrations("sqlite")[-1][0]
    with monkeypatch.context() as patch:
        newer = (newest + 1, "a_newer_release", "CREATE TABLE newer_release (id INTEGER);")
        patch.setattr(sqlite_module, "migrations", lambda dialect: [*migrations(dialect), newer])
        open_store(url).close()
    store = open_store(url, migrate=False)
    try:
        assert store.schema_versions() == (newest + 1, newest)
        settings = Settings(database_url=url, storage_url=f"file://{tmp_path}/objects")
        app = create_app(settings, service=build_service(settings, store))
        with running(app) as base:
            answer = httpx.get(f"{base}/readyz", timeout=30)
        assert (answer.status_code, answer.json()) == (200, {"status": "ok"})
    finally:
        store.close()
