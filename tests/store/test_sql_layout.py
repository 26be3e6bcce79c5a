"""Every dialect has the same query files and names, and migrations numbered in lockstep;
an applied schema matches across dialects (same tables and columns)."""

from __future__ import annotations

from importlib import resources

from docfence.store.queries import load_queries, migrations


def test_query_names_match_across_dialects() -> None:
    assert set(load_queries("sqlite")) == set(load_queries("postgres"))
    root = resources.files("docfence.store").joinpath("queries")
    files = {d: sorted(e.name for e in root.joinpath(d).iterdir()) for d in ("sqlite", "postgres")}
    assert files["sqlite"] == files["postgres"]


def test_migrations_in_lockstep() -> None:
    assert [(n, name) for n, name, _ in migrations("sqlite")] == \
        [(n, name) for n, name, _ in migrations("postgres")]
    numbers = [n for n, _, _ in migrations("sqlite")]
    assert numbers == list(range(1, len(numbers) + 1))


def test_applied_schemas_have_the_same_tables_and_columns(store) -> None:  # type: ignore[no-untyped-def]
    if store.dialect == "sqlite":
        conn = store._conn()
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                             "AND name NOT LIKE 'sqlite_%'")]
        got = {t: sorted(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
    else:
        rows = store._conn().execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema='public'")
        got = {}
        for r in rows:
            got.setdefault(r["table_name"], []).append(r["column_name"])
        got = {t: sorted(c) for t, c in got.items()}
    assert got["jobs"] and "audit_events" in got
    test_applied_schemas_have_the_same_tables_and_columns.seen[store.dialect] = got  # type: ignore[attr-defined]
    seen = test_applied_schemas_have_the_same_tables_and_columns.seen  # type: ignore[attr-defined]
    if len(seen) == 2:
        assert seen["sqlite"] == seen["postgres"]


test_applied_schemas_have_the_same_tables_and_columns.seen = {}  # type: ignore[attr-defined]
