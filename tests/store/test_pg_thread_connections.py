"""A PostgresStore never leaves a connection to the garbage collector: a thread's connection is closed
when the thread ends, and `close()` closes every thread's (each thread keeps its own)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest

from docfence.store.postgres import PostgresStore
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.procs import wait_for

pytestmark = pytest.mark.postgres


def _sessions(url: str, application_name: str) -> int:
    with psycopg.connect(url, autocommit=True) as watcher:
        row = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                              (application_name,)).fetchone()
    return int(row[0]) if row else 0


def _in_thread(run: Any) -> threading.Thread:
    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.filterwarnings("error::ResourceWarning")  # a connection the collector closes is a failure
def test_a_threads_connection_is_closed_when_the_thread_ends(pg_url: str) -> None:
    name = f"docfence-test-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(pg_url, application_name=name)
    seen: dict[str, Any] = {}
    thread = _in_thread(lambda: seen.update(conn=store._conn(), now=store.now()))
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive() and seen["now"] is not None
    assert seen["conn"].closed  # closed by the store, although this test still holds the object
    wait_for(lambda: _sessions(pg_url, name) == 0, HANG_GUARD_S, "the ended thread's session to go")
    store.close()


@pytest.mark.filterwarnings("error::ResourceWarning")
def test_close_closes_every_threads_connection_and_a_thread_still_running_reconnects(pg_url: str) -> None:
    name = f"docfence-test-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(pg_url, application_name=name)
    opened, go, seen = threading.Event(), threading.Event(), {}

    def worker() -> None:
        seen["conn"] = store._conn()
        store.now()
        opened.set()
        assert go.wait(HANG_GUARD_S)
        seen["again"] = store.now()  # after close(): a new connection, as after a dropped link

    thread = _in_thread(worker)
    assert opened.wait(HANG_GUARD_S)
    store.now()  # this thread's own connection too
    assert _sessions(pg_url, name) == 2
    store.close()
    assert seen["conn"].closed
    wait_for(lambda: _sessions(pg_url, name) == 0, HANG_GUARD_S, "every session of the store to go")
    go.set()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive() and seen["again"] is not None
    store.close()
