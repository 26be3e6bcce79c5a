"""PostgreSQL dialect: claims with FOR UPDATE SKIP LOCKED, now() as the clock, LISTEN/NOTIFY wake-ups
(store/wakeups_pg.py).

One connection per thread (autocommit, explicit transaction blocks), each under the session limits
of store/pg_session.py (idle in transaction, lock and statement timeouts, keepalives), named by the
caller's application_name, and closed when its thread ends or the store is closed
(store/pg_connections.py). A dropped connection is discarded and reported as StoreUnavailable, and
the next call reconnects. A transaction PostgreSQL rolled back for a deadlock or a serialization failure is
StoreConflict (retryable; the connection stays). A lock wait or a statement past its timeout, or a
full disk, is StoreUnavailable (retryable; the connection stays). `_translate` holds the whole table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.string import TextLoader

from docfence.core.clock import Clock
from docfence.core.errors import StoreConflict, StoreError, StoreUnavailable
from docfence.store.pg_connections import ThreadConnections
from docfence.store.pg_session import DEFAULT_APPLICATION_NAME, SessionLimits
from docfence.store.queries import load_queries, migrations
from docfence.store.sqlstore import Row, SqlStore
from docfence.store.wakeups_pg import PgListener

# 40P01 and 40001 only (psycopg makes them OperationalErrors, so they are caught first): the others of
# class 40, such as 40003 "statement completion unknown", do not say that nothing was written
_ROLLED_BACK = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
# The server refused this one statement (a lock wait past lock_timeout, a statement past
# statement_timeout, no space left): its transaction rolled back, the connection is sound.
_REFUSED: tuple[tuple[type[psycopg.Error], str], ...] = (
    (psycopg.errors.LockNotAvailable, "a PostgreSQL lock wait ran past lock_timeout; nothing was written, "
                                      "retry"),
    (psycopg.errors.QueryCanceled, "a PostgreSQL statement ran past statement_timeout (or was canceled); "
                                   "nothing was written, retry"),
    (psycopg.errors.DiskFull, "PostgreSQL has no space left on its device; nothing was written"),
    (psycopg.errors.InsufficientResources, "PostgreSQL is out of resources (memory, connections)"),
    (psycopg.errors.ReadOnlySqlTransaction, "PostgreSQL is read-only (a standby?); nothing was written"),
)


def _translate(exc: psycopg.Error, conn: psycopg.Connection[Row]) -> tuple[StoreError, bool]:
    """The StoreError a driver error is to callers, and whether the connection must be discarded.
    SQLite's table (store/sqlite.py, `_translate`) answers the same classes for the same causes."""
    if isinstance(exc, _ROLLED_BACK):  # PostgreSQL chose this transaction as the loser; the link is fine
        return StoreConflict(f"PostgreSQL rolled the transaction back ({exc.sqlstate}); "
                             "nothing was written, retry"), False
    for cls, message in _REFUSED:
        if isinstance(exc, cls) and not (conn.closed or conn.broken):
            return StoreUnavailable(message), False
    if isinstance(exc, psycopg.OperationalError) or conn.closed or conn.broken:
        return StoreUnavailable("the PostgreSQL connection failed"), True
    if isinstance(exc, psycopg.errors.FeatureNotSupported):
        # 0A000 is what a session's prepared statement answers once a migration changed its table
        # ("cached plan must not change result type"; no SQLSTATE of its own): PostgreSQL re-plans on
        # the next call, so retry. No query of ours uses an unsupported feature otherwise (the store
        # contract suite runs every one), so the class alone decides, never the message text.
        return StoreConflict("PostgreSQL re-planned a statement after a schema change (0A000); "
                             "nothing was written, retry"), False
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return StoreError("a unique constraint was violated"), False
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):  # e.g. terminating another role's session
        return StoreError("PostgreSQL denied this session's role a privilege the call needs (permission "
                          "denied, 42501)"), False
    return StoreError(f"PostgreSQL error ({exc.sqlstate})"), False


class _PgTx:
    """Statements are pipelined: `send` queues one without waiting; reading a result flushes."""

    def __init__(self, conn: psycopg.Connection[Row], queries: dict[str, str], pipeline: Any) -> None:
        self.conn, self.queries, self.pipeline = conn, queries, pipeline

    def all(self, name: str, **params: Any) -> list[Row]:
        cur = self.conn.execute(self.queries[name], params)
        self.pipeline.sync()
        return list(cur.fetchall()) if cur.description else []

    def one(self, name: str, **params: Any) -> Row | None:
        rows = self.all(name, **params)
        return rows[0] if rows else None

    def run(self, name: str, **params: Any) -> int:
        cur = self.conn.execute(self.queries[name], params)
        self.pipeline.sync()
        return cur.rowcount

    def send(self, name: str, **params: Any) -> None:
        self.conn.execute(self.queries[name], params)

    def send_many(self, name: str, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.conn.cursor().executemany(self.queries[name], rows)

    def announce_work(self) -> None:
        self.send("announce_work")

    def announce_job_end(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self.send("announce_job_end", ids=json.dumps(list(job_ids)))


class PostgresStore(SqlStore):
    dialect = "postgres"
    #: Concurrent write transactions worth running from one process (row locks, not a file lock).
    write_slots = 32

    def __init__(self, url: str, *, clock: Clock | None = None,
                 application_name: str = DEFAULT_APPLICATION_NAME,
                 limits: SessionLimits | None = None) -> None:
        """`application_name` names the caller's role in pg_stat_activity (docfence-worker,
        docfence-api, docfence-reconciler): `docfence inspect` names it when a session holds a job."""
        super().__init__(clock)
        self.url = url
        self.application_name = application_name
        self.limits = limits or SessionLimits()
        self.queries = load_queries("postgres")
        self._connections = ThreadConnections(self._connect)

    def _connect(self) -> psycopg.Connection[Row]:
        try:
            conn = psycopg.connect(self.url, autocommit=True, row_factory=dict_row,
                                   **self.limits.connect_kwargs(self.url, self.application_name))
        except psycopg.OperationalError as exc:
            raise StoreUnavailable("cannot connect to PostgreSQL") from exc
        conn.execute("SET TIME ZONE 'UTC'")
        # JSON columns arrive as text: policies are parsed once per distinct text (cached), and
        # audit details hash exactly what was stored.
        conn.adapters.register_loader("jsonb", TextLoader)
        return conn

    def _conn(self) -> psycopg.Connection[Row]:
        return self._connections.get()

    @contextmanager
    def _tx(self, *, write: bool = True) -> Iterator[_PgTx]:
        conn = self._conn()
        if conn.broken or conn.pgconn.status != 0:  # dropped since last use: reconnect once
            self._drop()
            conn = self._conn()
        try:
            with conn.pipeline() as pipeline, conn.transaction():
                yield _PgTx(conn, self.queries, pipeline)
        except psycopg.Error as exc:
            error, drop = _translate(exc, conn)
            if drop:
                self._drop()
            raise error from exc

    def drop_connection(self) -> None:
        """Close this thread's connection abruptly, as a network drop would (fault tests)."""
        conn = self._connections.current()
        if conn is not None:
            conn.pgconn.finish()

    def close_thread_connection(self) -> None:
        self._drop()

    def _drop(self) -> None:
        self._connections.close_current()

    def migrate(self) -> list[str]:
        """Apply pending migrations in order under an advisory lock (safe with concurrent starters)."""
        conn = self._conn()
        applied = []
        with conn.transaction():
            for name, value in self.limits.migration_settings().items():  # DDL may wait and run long
                conn.execute("SELECT set_config(%s, %s, true)", (name, value))
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('docfence_migrate'))")
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                         "name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            done = {r["version"] for r in conn.execute("SELECT version FROM schema_migrations")}
            for version, name, sql in migrations("postgres"):
                if version not in done:
                    conn.execute(sql.encode())
                    conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                                 (version, name))
                    applied.append(f"{version:03d}_{name}")
        return applied

    def run_script(self, name: str) -> None:
        with self._tx() as tx:
            tx.run(name)

    def _wakeup_key(self) -> str:
        return f"postgres:{self.url}"

    def _new_listener(self) -> PgListener:
        return PgListener(self.url, application_name=f"{self.application_name}-wakeups", limits=self.limits)

    def close(self) -> None:
        """Close every thread's connection and release this store's share of the wake-up listener."""
        self._connections.close_all()
        self._release_wakeups()
