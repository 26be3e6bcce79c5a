"""The PostgreSQL connections of one store, one per thread, all tracked: a thread's connection is closed
when the thread ends (its thread-local holder goes with the thread, and the holder's finalizer closes
it) or when the store is closed (`close_all`), never left to the garbage collector."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import weakref
from collections.abc import Callable

import psycopg

from docfence.store.sqlbase import Row

Conn = psycopg.Connection[Row]


class _Open:
    """The connections not closed yet, by key. Finalizers reach this, never the store, so a thread
    that outlives its store does not keep the store alive."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conns: dict[int, Conn] = {}

    def close(self, key: int, pid: int) -> None:
        """Close connection `key` if still open. Never in a forked child: its socket is the parent's,
        and the lock may have been held by a thread that did not survive the fork."""
        if os.getpid() != pid:
            return
        with self.lock:
            conn = self.conns.pop(key, None)
        if conn is not None:
            with contextlib.suppress(Exception):  # ending anyway: a dead link has nothing to close
                conn.close()


class _Holder:
    """Held in one thread's local storage only: when the thread ends, it goes, and its finalizer
    closes the connection."""

    __slots__ = ("__weakref__", "conn")

    def __init__(self, conn: Conn) -> None:
        self.conn = conn


class ThreadConnections:
    """`get` answers the calling thread's connection, opening one with `connect` when it has none
    (or its last one was closed); `close_current` closes the calling thread's, `close_all` every
    thread's."""

    def __init__(self, connect: Callable[[], Conn]) -> None:
        self._connect = connect
        self._local = threading.local()
        self._open = _Open()
        self._keys = itertools.count()

    def get(self) -> Conn:
        conn = self.current()
        if conn is None or conn.closed:
            conn = self._connect()
            self._hold(conn)
        return conn

    def current(self) -> Conn | None:
        """The calling thread's connection, as it is (perhaps closed or broken); None when it has none."""
        holder: _Holder | None = getattr(self._local, "holder", None)
        return holder.conn if holder is not None else None

    def close_current(self) -> None:
        """Close the calling thread's connection; its next `get` opens another."""
        holder: _Holder | None = getattr(self._local, "holder", None)
        self._local.holder = None
        if holder is not None:
            holder.conn.close()

    def close_all(self) -> None:
        """Close every thread's connection. A thread inside a transaction then fails it with
        StoreUnavailable, as after a dropped link; a thread between transactions opens another."""
        self._local.holder = None
        with self._open.lock:
            conns, self._open.conns = list(self._open.conns.values()), {}
        for conn in conns:
            conn.close()

    def _hold(self, conn: Conn) -> None:
        key = next(self._keys)
        holder = _Holder(conn)
        with self._open.lock:
            self._open.conns[key] = conn
        # atexit=False: at interpreter exit a daemon thread may still be inside its connection
        weakref.finalize(holder, self._open.close, key, os.getpid()).atexit = False
        self._local.holder = holder  # replacing an older holder closes that one's connection too
