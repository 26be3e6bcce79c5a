"""Loads the named queries of a dialect (`-- name: x` header, one-line description, then the SQL)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.M)
_NAMED_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """Query name -> SQL text in the driver's parameter style (psycopg: %(name)s).

    A dialect's SQL lives in queries/<dialect>/*.sql (one file per domain, the same file and query
    names in every dialect); a name defined twice is an error.
    """
    queries: dict[str, str] = {}
    folder = resources.files("docfence.store").joinpath(f"queries/{dialect}")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            _parse_into(queries, entry.read_text("utf-8"), dialect, entry.name)
    return queries


def _parse_into(queries: dict[str, str], text: str, dialect: str, source: str) -> None:
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name} is defined twice ({source})")
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
        sql = "\n".join(lines).strip()
        if dialect == "postgres":
            sql = _NAMED_PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
        queries[name] = sql


def migrations(dialect: str) -> list[tuple[int, str, str]]:
    """(number, name, sql) of every migration of a dialect, in order."""
    folder = resources.files("docfence.store").joinpath(f"migrations/{dialect}")
    found = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d{3})_([a-z0-9_]+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    return sorted(found)
