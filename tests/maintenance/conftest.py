"""Fixtures of the maintenance tests: a PostgreSQL store of its own, emptied, on the fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from docfence.core.clock import FakeClock
from docfence.store.postgres import PostgresStore
from docfence.testing.stores import postgres_store, reset


@pytest.fixture
def pg(pg_url: str, clock: FakeClock) -> Iterator[PostgresStore]:
    """The PostgreSQL store only, for what needs sessions and row locks (SQLite has neither)."""
    store = postgres_store(pg_url, clock)
    reset(store)
    try:
        yield store
    finally:
        store.close()
