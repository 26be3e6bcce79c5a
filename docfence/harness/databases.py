"""Throwaway PostgreSQL databases for benchmarks and tests: created empty on the admin URL's server,
dropped (connections and all) afterwards."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from docfence.config import admin_database_url


def pg_url_for(dbname: str) -> str:
    base, _, _ = admin_database_url().rpartition("/")
    return f"{base}/{dbname}"


@contextmanager
def temporary_pg_database(prefix: str = "docfence_test") -> Iterator[str]:
    """Create an empty database, yield its URL, drop it afterwards."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(admin_database_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_url_for(name)
    finally:
        with psycopg.connect(admin_database_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
