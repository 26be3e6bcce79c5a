"""Loads the named queries of a dialect (`-- name: x` header, one-line description, then the SQL)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.M)
_NAMED_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """Query name -> SQL text in the driver's parameter style (psycopg: %(name)s)."""
    text = resources.files("docfence.store").joinpath(f"queries/{dialect}.sql").read_text("utf-8")
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
        sql = "\n".join(lines).strip()
        if dialect == "postgres":
            sql = _NAMED_PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
        queries[name] = sql
    return queries


def migrations(dialect: str) -> list[tuple[int, str, str]]:
    """(number, name, sql) of every migration of a dialect, in order."""
    folder = resources.files("docfence.store").joinpath(f"migrations/{dialect}")
    found = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d{3})_([a-z0-9_]+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    return sorted(found)
