"""Templates belong to a tenant (or are shared by an operator): another tenant cannot read them, list
them, request reports or schedules with them, or publish versions of them; on both stores. Migration 005
gives templates created before owners existed the tenant of the key that created them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import psycopg

from docfence.store.base import open_store
from docfence.store.queries import migrations
from docfence.testing.stores import temporary_pg_database

from .conftest import ApiEnv


def _auth(env: ApiEnv, tenant: str, scopes: tuple[str, ...]) -> dict[str, str]:
    return {"Authorization": f"Bearer {env.key(tenant, scopes)}"}


def _template(template_id: str, html: str = "<p>private</p>") -> dict[str, Any]:
    return {"id": template_id, "html": html, "schema": {"type": "object"}}


def test_templates_are_scoped_to_their_tenant(any_env: ApiEnv) -> None:
    a_admin, b_admin = _auth(any_env, "a", ("admin",)), _auth(any_env, "b", ("admin",))
    b_user = _auth(any_env, "b", ("submit", "read"))
    with httpx.Client(base_url=any_env.base_url, timeout=30) as http:
        created = http.post("/v1/templates", json=_template("a-private"), headers=a_admin)
        assert created.status_code == 201 and created.json()["shared"] is False
        # b reads nothing of it: 404 like a missing template, and it is not listed
        assert http.get("/v1/templates/a-private/versions/1", headers=b_user).status_code == 404
        assert http.get("/v1/templates", headers=b_user).json() == []
        # b can neither request reports nor schedule with it
        body = {"subject": "s", "period": "2026-01", "template": "a-private@1", "data": {}}
        refused = http.post("/v1/report-requests", json=body, headers=b_user)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
        assert http.post("/v1/schedules", json=body, headers=b_user).status_code == 404
        # b's admin cannot publish a version of it
        hijack = http.post("/v1/templates", json=_template("a-private", "<p>mine now</p>"), headers=b_admin)
        assert hijack.status_code == 409 and hijack.json()["error"]["code"] == "template_id_taken"
        assert "<p>mine" not in repr(any_env.store.list_templates())
        # a still uses it
        a_user = _auth(any_env, "a", ("submit", "read"))
        assert (
            http.get("/v1/templates/a-private/versions/1", headers=a_user).json()["html"] == "<p>private</p>"
        )
        assert http.post("/v1/report-requests", json=body, headers=a_user).status_code == 201
    versions = any_env.store.list_templates("a-private")
    assert [(v.version, v.owner) for v in versions] == [(1, "a")]


def test_operators_share_templates_that_tenants_use_but_cannot_change(any_env: ApiEnv) -> None:
    operator = _auth(any_env, "operators", ("operator",))
    a_admin, b_user = _auth(any_env, "a", ("admin",)), _auth(any_env, "b", ("submit", "read"))
    with httpx.Client(base_url=any_env.base_url, timeout=30) as http:
        shared = http.post("/v1/templates", json=_template("letterhead", "<p>shared</p>"), headers=operator)
        assert shared.status_code == 201 and shared.json()["shared"] is True
        http.post("/v1/templates", json=_template("a-own"), headers=a_admin)
        assert [t["id"] for t in http.get("/v1/templates", headers=b_user).json()] == ["letterhead"]
        assert [t["id"] for t in http.get("/v1/templates", headers=operator).json()] == ["letterhead"]
        assert http.get("/v1/templates/a-own/versions/1", headers=operator).status_code == 404
        body = {"subject": "s", "period": "2026-01", "template": "letterhead@1", "data": {}}
        assert http.post("/v1/report-requests", json=body, headers=b_user).status_code == 201
        changed = http.post("/v1/templates", json=_template("letterhead", "<p>a's</p>"), headers=a_admin)
        assert changed.status_code == 409 and "shared" in changed.json()["error"]["message"]
        # operators hold no tenant's data rights
        assert http.post("/v1/report-requests", json=body, headers=operator).status_code == 403


def test_migration_005_gives_old_templates_the_tenant_of_their_creator(tmp_path: Path) -> None:
    rows = [("k1", "acme"), ("k2", "globex")]
    templates = [("acme-t", "key:k1"), ("globex-t", "key:k2"), ("cli-t", "cli")]

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at REAL)"
        )
        for number, name, sql in migrations("sqlite"):
            if number <= 4:
                conn.executescript(sql)
                conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)", (number, name))
        conn.executemany("INSERT INTO api_keys VALUES (?, ?, 'n', 'admin', 'h', 0, NULL)", rows)
        conn.executemany(
            "INSERT INTO templates VALUES (?, 1, 'n', 's', '<p/>', '', '{}', '{}', 0, ?)", templates
        )
    with temporary_pg_database("docfence_mig") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            for number, name, sql in migrations("postgres"):
                if number <= 4:
                    conn.execute(sql.encode())
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (number, name)
                    )
            for key_id, tenant in rows:
                conn.execute(
                    "INSERT INTO api_keys VALUES (%s, %s, 'n', 'admin', 'h', now(), NULL)", (key_id, tenant)
                )
            for template_id, by in templates:
                conn.execute(
                    "INSERT INTO templates VALUES (%s, 1, 'n', 's', '<p/>', '', '{}', '{}', now(), %s)",
                    (template_id, by),
                )
        for url_ in (f"sqlite:///{db}", url):
            store = open_store(url_)  # applies 005
            try:
                owners = {t.id: t.owner for t in store.list_templates()}
                assert owners == {"acme-t": "acme", "globex-t": "globex", "cli-t": None}, url_
                assert [t.id for t in store.list_templates(visible_to="acme")] == ["acme-t", "cli-t"]
            finally:
                store.close()
