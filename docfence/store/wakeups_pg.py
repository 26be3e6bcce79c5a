"""PostgreSQL wake-ups: one LISTEN connection per process and database, read by a dispatcher thread
that hands each NOTIFY to the waiting threads, reconnecting whenever the connection drops.

Transitions send `pg_notify` inside their own transaction (queries/postgres/wakeups.sql), so
PostgreSQL delivers an announcement only when, and after, that transaction commits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from typing import Any

import psycopg

from docfence.store.pg_session import SessionLimits
from docfence.store.wakeups import Listener

# The channels the named queries `announce_work` and `announce_job_end` notify.
WORK_CHANNEL = "docfence_work"  # payload empty: jobs were queued
JOB_END_CHANNEL = "docfence_job_end"  # payload: the id of a job that reached a terminal state
APPLICATION_NAME = "docfence-wakeups"  # how the listening sessions show in pg_stat_activity by default
HEALTH_CHECK_S = 30.0  # a connection silent this long runs `SELECT 1` to prove it is still alive
RETRY_MIN_S, RETRY_MAX_S = 0.05, 5.0  # reconnection back-off

log = logging.getLogger("docfence.store.wakeups")


class PgListener(Listener):
    """The dispatcher thread of one database. After each (re)connection it wakes every waiter, since
    announcements sent while it was not listening are lost; meanwhile waiters fall back on their
    timeouts (the safety poll). Its session runs under the same limits as the store's (keepalives and
    tcp_user_timeout notice a black-holed link within about one lease, then it reconnects)."""

    def __init__(self, url: str, *, application_name: str = APPLICATION_NAME,
                 limits: SessionLimits | None = None) -> None:
        super().__init__()
        self.url = url
        self.application_name = application_name
        self.limits = limits or SessionLimits()
        self.connects = 0  # how often LISTEN took effect (tests and benchmarks look)
        self._stop = threading.Event()
        self._conn_lock = threading.Lock()  # guards _conn: close() interrupts it from another thread
        self._conn: psycopg.Connection[Any] | None = None
        self._thread: threading.Thread | None = None
        self._failing = False  # a connection failure is logged once, not on every retry

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="docfence-wakeups", daemon=True)
            self._thread.start()

    def backend_pid(self) -> int | None:
        """The server process of the listening session, while connected (fault tests kill it)."""
        with self._conn_lock:
            return self._conn.info.backend_pid if self._conn is not None and not self._conn.closed else None

    def close(self) -> None:
        self._stop.set()
        with self._conn_lock:
            if self._conn is not None:
                _interrupt(self._conn)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        delay = RETRY_MIN_S
        while not self._stop.is_set():
            conn = self._listen()
            if conn is None:
                self._stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            delay = RETRY_MIN_S
            try:
                self.fanout.missed_announcements()
                self._pump(conn)
            except (psycopg.Error, OSError) as exc:
                if not self._stop.is_set():
                    log.warning("wake-up listener lost its connection (%s); reconnecting", type(exc).__name__)
            except Exception:  # never let the thread die: waiters would silently fall back to polling
                log.exception("wake-up listener failed; reconnecting")
            finally:
                self._forget(conn)

    def _listen(self) -> psycopg.Connection[Any] | None:
        try:
            conn = psycopg.connect(self.url, autocommit=True,
                                   **self.limits.connect_kwargs(self.url, self.application_name))
            conn.execute(f"LISTEN {WORK_CHANNEL}")
            conn.execute(f"LISTEN {JOB_END_CHANNEL}")
        except psycopg.Error as exc:
            if not self._failing:
                log.warning("wake-up listener cannot connect (%s); waiters poll meanwhile",
                            type(exc).__name__)
            self._failing = True
            return None
        with self._conn_lock:
            if self._stop.is_set():
                conn.close()
                return None
            self._conn = conn
        if self._failing:
            log.info("wake-up listener connected again")
        self._failing = False
        self.connects += 1
        return conn

    def _pump(self, conn: psycopg.Connection[Any]) -> None:
        """Dispatch notifications until the connection fails or close() interrupts it."""
        while not self._stop.is_set():
            received = False
            for note in conn.notifies(timeout=HEALTH_CHECK_S):
                received = True
                if note.channel == WORK_CHANNEL:
                    self.fanout.work_announced()
                elif note.channel == JOB_END_CHANNEL:
                    self.fanout.jobs_ended((note.payload,))
            if not received and not self._stop.is_set():
                conn.execute("SELECT 1")

    def _forget(self, conn: psycopg.Connection[Any]) -> None:
        with self._conn_lock:  # closed under the lock, so close() never touches a reused descriptor
            self._conn = None
            with contextlib.suppress(psycopg.Error, OSError):
                conn.close()


def _interrupt(conn: psycopg.Connection[Any]) -> None:
    """Wake the dispatcher blocked reading `conn`: shut its socket down (the caller holds _conn_lock)."""
    with contextlib.suppress(psycopg.Error, OSError, ValueError):
        sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()
