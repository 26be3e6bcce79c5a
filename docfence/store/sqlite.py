"""SQLite dialect: one file, WAL with synchronous=FULL, writers serialised by BEGIN IMMEDIATE; wake-ups
through a folder of datagram sockets next to the file (store/wakeups_sqlite.py).

Times are REAL epoch seconds in the database and aware UTC datetimes outside it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from docfence.core.clock import Clock
from docfence.core.errors import StoreError, StoreUnavailable
from docfence.store.queries import load_queries, migrations
from docfence.store.sqlstore import Row, SqlStore
from docfence.store.wakeups_sqlite import SocketDirListener, announce, socket_dir

TIME_COLUMNS = frozenset({
    "created_at", "updated_at", "claimed_at", "finished_at", "deleted_at", "lease_expires_at",
    "heartbeat_at", "deadline_at", "run_after", "retention_until", "ended_at", "at", "now", "paused_at",
    "applied_at", "observed_at", "requested_at", "expires_at", "revoked_at", "last_used_at",
    "period_start", "next_run_at", "superseded_at", "disabled_at", "secret_grace_until",
})
_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


def _param(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, bool):
        return int(value)
    return value


def _params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: _param(v) for k, v in params.items()}


def _row(names: list[str], values: tuple[Any, ...]) -> Row:
    row = dict(zip(names, values, strict=True))
    for key in TIME_COLUMNS.intersection(row):
        if row[key] is not None:
            row[key] = datetime.fromtimestamp(row[key], UTC)
    return row


class _SqliteTx:
    def __init__(self, conn: sqlite3.Connection, queries: dict[str, str]) -> None:
        self.conn, self.queries = conn, queries
        self.work = False  # announced once the transaction has committed (SqliteStore._tx)
        self.ended: list[str] = []

    def _exec(self, name: str, params: dict[str, Any]) -> sqlite3.Cursor:
        return self.conn.execute(self.queries[name], _params(params))

    def all(self, name: str, **params: Any) -> list[Row]:
        cur = self._exec(name, params)
        names = [d[0] for d in cur.description or ()]
        return [_row(names, r) for r in cur.fetchall()]

    def one(self, name: str, **params: Any) -> Row | None:
        rows = self.all(name, **params)
        return rows[0] if rows else None

    def run(self, name: str, **params: Any) -> int:
        cur = self._exec(name, params)
        if cur.description:
            cur.fetchall()
        return cur.rowcount

    def send(self, name: str, **params: Any) -> None:
        self.run(name, **params)

    def send_many(self, name: str, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.conn.executemany(self.queries[name], [_params(r) for r in rows])

    def announce_work(self) -> None:
        self.work = True

    def announce_job_end(self, job_ids: Sequence[str]) -> None:
        self.ended.extend(job_ids)


class SqliteStore(SqlStore):
    dialect = "sqlite"
    #: One writer at a time: SQLite serialises writers (BEGIN IMMEDIATE), so callers queue in-process
    #: rather than sleep in SQLite's busy handler.
    write_slots = 1

    def __init__(self, path: str | Path, *, clock: Clock | None = None, synchronous: str = "FULL") -> None:
        super().__init__(clock)
        self.path = str(path)
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise StoreError("synchronous must be FULL, EXTRA or NORMAL")
        self.synchronous = synchronous
        self.queries = load_queries("sqlite")
        self._local = threading.local()
        self._wakeup_folder = socket_dir(Path(self.path).resolve())
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30.0, check_same_thread=True)
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed transition survives power loss (NORMAL may lose the last commits).
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
        return conn

    @contextmanager
    def _tx(self, *, write: bool = True) -> Iterator[_SqliteTx]:
        """One transaction; what it announced is sent to the waiting processes once it committed."""
        conn = self._conn()
        tx = _SqliteTx(conn, self.queries)
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield tx
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode in _BUSY:
                raise StoreUnavailable("the SQLite database is busy") from exc
            raise StoreError(f"SQLite error ({exc.sqlite_errorname})") from exc
        if tx.work or tx.ended:
            announce(self._wakeup_folder, work=tx.work, ended=tx.ended)

    def migrate(self) -> list[str]:
        """Apply pending migrations in order; returns the names applied."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                         "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)")
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            applied = []
            for version, name, sql in migrations("sqlite"):
                if version in done:
                    continue
                for statement in _statements(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations VALUES (?, ?, julianday('now'))", (version, name))
                applied.append(f"{version:03d}_{name}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return applied

    def run_script(self, name: str) -> None:
        """Run a multi-statement named query (tests use `truncate_all`)."""
        self._conn().executescript(self.queries[name])

    def drop_connection(self) -> None:
        """Close this thread's handle abruptly (fault tests); the next call reopens the file."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        """Close this thread's handle and release this store's share of the wake-up listener."""
        self.drop_connection()
        self._release_wakeups()

    def _wakeup_key(self) -> str:
        return f"sqlite:{self._wakeup_folder}"

    def _new_listener(self) -> SocketDirListener:
        return SocketDirListener(self._wakeup_folder)


def _statements(sql: str) -> list[str]:
    return [s.strip() for s in sqlite3_split(sql) if s.strip()]


def sqlite3_split(sql: str) -> list[str]:
    """Split a migration into statements (complete_statement knows about strings and comments)."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf)
            buf = ""
    if buf.strip():
        out.append(buf)
    return out
