"""PostgreSQL's own rollbacks (a deadlock it broke) reach callers as StoreConflict: retryable, the
connection kept, nothing written. A real deadlock between the store's transaction and another session."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import StoreConflict, StoreUnavailable
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.procs import wait_for
from docfence.testing.stores import postgres_store

LOCK = "SELECT id FROM jobs WHERE id = %s FOR UPDATE"


@pytest.mark.postgres
def test_a_deadlock_is_a_retryable_conflict_that_keeps_the_connection(pg_url: str, clock: FakeClock,
                                                                      tmp_path: Path) -> None:
    """PostgreSQL checks a lock wait for a cycle once, `deadlock_timeout` after it began: the store's
    wait starts last, once the other session already waits for it, so the store's side finds the cycle."""
    store = postgres_store(pg_url, clock)
    first, second = (store.submit(NewJob(tenant="t1", policy=JobPolicy()))[0].id for _ in range(2))
    other = psycopg.connect(pg_url, autocommit=True)
    watcher = psycopg.connect(pg_url, autocommit=True)
    holding, go, seen = threading.Event(), threading.Event(), {}

    def store_side() -> None:
        try:
            with store._tx() as tx:
                seen["tx_conn"] = tx.conn
                tx.conn.execute("SET LOCAL deadlock_timeout = '10ms'")
                tx.conn.execute(LOCK, (first,))
                tx.pipeline.sync()
                holding.set()
                assert go.wait(HANG_GUARD_S)
                tx.conn.execute(LOCK, (second,))  # `other` holds it and waits for `first`: a cycle
                tx.pipeline.sync()
        except Exception as exc:  # the test inspects what the store raised
            seen["error"] = exc
        conn = store._connections.current()  # read in this thread: its connection closes as it ends
        seen["kept"] = conn is seen["tx_conn"] and conn is not None and not conn.closed
        seen["after"] = store.get(first).state  # the same connection serves the next call

    try:
        other.execute("BEGIN")
        other.execute("SET LOCAL deadlock_timeout = '60s'")
        other.execute(LOCK, (second,))
        ours = threading.Thread(target=store_side)
        ours.start()
        assert holding.wait(HANG_GUARD_S)
        theirs = threading.Thread(target=lambda: other.execute(LOCK, (first,)))  # waits for the store
        theirs.start()
        query = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND wait_event_type = 'Lock'")
        wait_for(lambda: watcher.execute(query).fetchone()[0] >= 1,  # type: ignore[index]
                 HANG_GUARD_S, "the other session waiting for the store's lock")
        go.set()
        ours.join(HANG_GUARD_S)
        theirs.join(HANG_GUARD_S)  # it gets `first` once the store's transaction is rolled back
        other.execute("ROLLBACK")
    finally:
        other.close()
        watcher.close()
    error = seen["error"]
    assert isinstance(error, StoreConflict) and isinstance(error, StoreUnavailable)
    assert error.code == "store_conflict" and error.retryable and "40P01" in str(error)
    assert seen["kept"] and seen["after"] == "queued"
    store.close()
