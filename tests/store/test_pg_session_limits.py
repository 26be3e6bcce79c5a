"""Every docfence PostgreSQL session runs under limits shorter than the lease (store/pg_session.py): the
server reports them back on a store's connection, the sockets carry keepalives and tcp_user_timeout
(the LISTEN connection too), and a session that locks a job row and goes silent is ended by the server,
which releases the lock, so the reconciler's pass takes the row."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import ConfigError, StoreUnavailable
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.core.states import JobState
from docfence.store.pg_session import DEFAULT_LEASE_TTL_S, SessionLimits
from docfence.store.postgres import PostgresStore
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.procs import wait_for
from docfence.testing.stores import reset

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_store(pg_url: str, clock: FakeClock) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url, clock=clock, application_name="docfence-test-worker")
    store.migrate()
    reset(store)
    try:
        yield store
    finally:
        store.close()


def _settings(conn: psycopg.Connection[Any], names: list[str]) -> dict[str, str]:
    rows = conn.execute("SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)", (names,))
    return {r["name"]: f"{r['setting']}{r['unit']}" for r in rows}


def _sockopts(fd: int) -> dict[str, int]:
    sock = socket.socket(fileno=fd)  # a duplicate of the connection's descriptor, closed below
    try:
        return {"keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                "user_timeout_ms": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)}
    finally:
        sock.close()


def test_a_store_session_reports_its_limits_and_name(pg_store: PostgresStore) -> None:
    limits = SessionLimits()
    conn = pg_store._conn()
    got = _settings(conn, list(limits.server_settings()))
    assert got == limits.server_settings()  # pg_settings answers milliseconds, as we sent them
    show = {name: conn.execute(f"SHOW {name}").fetchone() for name in limits.server_settings()}
    assert show == {"idle_in_transaction_session_timeout": {"idle_in_transaction_session_timeout": "10s"},
                    "lock_timeout": {"lock_timeout": "5s"}, "statement_timeout": {"statement_timeout": "10s"}}
    assert conn.execute("SHOW application_name").fetchone() == {"application_name": "docfence-test-worker"}
    every = [limits.idle_in_transaction_s, limits.lock_timeout_s, limits.statement_timeout_s,
             limits.tcp_user_timeout_s, limits.keepalive_detection_s]
    assert max(every) < DEFAULT_LEASE_TTL_S
    opts = _sockopts(os.dup(conn.pgconn.socket))
    assert opts == {"keepalive": 1, "idle": 5, "interval": 2, "count": 3, "user_timeout_ms": 10_000}


def test_the_listen_connection_has_the_same_liveness_limits(pg_store: PostgresStore) -> None:
    listener = pg_store._new_listener()
    listener.start()
    try:
        wait_for(lambda: listener.backend_pid() is not None, HANG_GUARD_S, "the LISTEN connection")
        with listener._conn_lock:
            assert listener._conn is not None
            fd = os.dup(listener._conn.pgconn.socket)
        assert _sockopts(fd)["user_timeout_ms"] == 10_000
        watcher = psycopg.connect(pg_store.url, autocommit=True)
        try:
            row = watcher.execute("SELECT application_name FROM pg_stat_activity WHERE pid = %s",
                                  (listener.backend_pid(),)).fetchone()
        finally:
            watcher.close()
        assert row == ("docfence-test-worker-wakeups",)
    finally:
        listener.close()


def test_a_migration_runs_under_its_own_long_timeouts(pg_store: PostgresStore) -> None:
    conn = pg_store._conn()
    with conn.transaction():
        for name, value in SessionLimits().migration_settings().items():
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        assert conn.execute("SHOW statement_timeout").fetchone() == {"statement_timeout": "15min"}
    assert conn.execute("SHOW statement_timeout").fetchone() == {"statement_timeout": "10s"}  # LOCAL only
    assert pg_store.migrate() == []


def test_limits_at_or_above_the_lease_are_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match="idle_in_transaction_s"):
        SessionLimits(idle_in_transaction_s=DEFAULT_LEASE_TTL_S)
    with pytest.raises(ConfigError, match="keepalive detection"):
        SessionLimits(keepalives_idle_s=20, keepalives_interval_s=5, keepalives_count=3)


def test_a_url_keeps_its_own_options_and_ours_win() -> None:
    kwargs = SessionLimits().connect_kwargs("postgresql://u@h/db?options=-c%20search_path%3Dx", "docfence")
    assert kwargs["options"].startswith("-c search_path=x -c idle_in_transaction_session_timeout=10000ms")


def test_a_silent_session_holding_a_job_row_is_ended_by_the_server(pg_url: str, clock: FakeClock,
                                                                    pg_store: PostgresStore) -> None:
    """The frozen client: its transaction locked the job's row and then said nothing. With a 300 ms
    idle-in-transaction limit the server ends the session; the lock is gone and the pass moves the job."""
    job = pg_store.submit(NewJob(tenant="t1", policy=JobPolicy(lease_ttl_s=10)))[0]
    pg_store.claim("w")
    frozen = PostgresStore(pg_url, clock=clock, application_name="docfence-frozen",
                           limits=SessionLimits(idle_in_transaction_s=0.3))
    locked, release = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def silent_client() -> None:
        try:
            with frozen._tx() as tx:
                tx.conn.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job.id,))
                tx.pipeline.sync()
                seen["pid"] = tx.conn.info.backend_pid
                locked.set()
                assert release.wait(HANG_GUARD_S)  # silent: no statement while the server decides
                tx.conn.execute("SELECT 1")
                tx.pipeline.sync()
        except Exception as exc:  # the test inspects what the store raised
            seen["error"] = exc

    thread = threading.Thread(target=silent_client)
    thread.start()
    watcher = psycopg.connect(pg_url, autocommit=True)
    try:
        assert locked.wait(HANG_GUARD_S)
        clock.advance(11)  # the lease has expired: only the lock keeps the pass away
        wait_for(lambda: watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                         (seen["pid"],)).fetchone() == (0,),
                 HANG_GUARD_S, "the server to end the idle-in-transaction session")
        release.set()
        thread.join(HANG_GUARD_S)
        passed = pg_store.requeue_expired_pass()
    finally:
        release.set()
        watcher.close()
        frozen.close()
    assert isinstance(seen.get("error"), StoreUnavailable)  # its connection is gone, reported retryable
    assert [j.id for j in passed.moved] == [job.id] and passed.skipped == []
    assert pg_store.get(job.id).state is JobState.QUEUED
