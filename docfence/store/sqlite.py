"""SQLite dialect: one file, WAL with synchronous=FULL, writers serialised by BEGIN IMMEDIATE; wake-ups
through a folder of datagram sockets next to the file (store/wakeups_sqlite.py). The file, its WAL,
shared-memory and journal files are 0600 whatever the umask (`_private_database`).

Times are REAL epoch seconds in the database and aware UTC datetimes outside it. Driver errors reach
callers as the StoreError classes PostgreSQL's do (`_translate`). SQLite has no server to end a frozen
client's transaction: its bound is that no docfence transaction spans a render or any other wait (the
worker renders between transactions) and that a writer waits at most BUSY_TIMEOUT_S for the write
lock, then fails with StoreUnavailable (retryable), never past its lease.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from docfence.core.clock import Clock
from docfence.core.errors import StoreError, StoreUnavailable
from docfence.core.private_files import create_private_file, private_dirs, tighten
from docfence.store.queries import load_queries, migrations
from docfence.store.sqlstore import Row, SqlStore
from docfence.store.wakeups_sqlite import SocketDirListener, announce, socket_dir

TIME_COLUMNS = frozenset({
    "created_at", "updated_at", "claimed_at", "finished_at", "deleted_at", "lease_expires_at",
    "heartbeat_at", "deadline_at", "run_after", "retention_until", "ended_at", "at", "now", "paused_at",
    "applied_at", "observed_at", "requested_at", "expires_at", "revoked_at", "last_used_at",
    "period_start", "next_run_at", "superseded_at", "disabled_at", "secret_grace_until",
})
#: How long a writer waits for another connection's write lock: below the default lease (30 s), so a
#: heartbeat that cannot write fails (StoreUnavailable) while its lease still holds.
BUSY_TIMEOUT_S = 10.0
# Primary result codes (the low byte of an extended code) that mean "the store cannot serve this now",
# retryable as PostgreSQL's connection, lock-timeout and disk-full errors are.
_UNAVAILABLE = {
    sqlite3.SQLITE_BUSY: "the SQLite database is busy (its write lock is held); nothing was written, retry",
    sqlite3.SQLITE_LOCKED: "the SQLite database is locked; nothing was written, retry",
    sqlite3.SQLITE_FULL: "no space left on the device of the SQLite database; nothing was written",
    sqlite3.SQLITE_IOERR: "the SQLite database file cannot be read or written (disk I/O error)",
    sqlite3.SQLITE_CANTOPEN: "the SQLite database file cannot be opened",
    sqlite3.SQLITE_READONLY: "the SQLite database is read-only; nothing was written",
    sqlite3.SQLITE_PROTOCOL: "the SQLite database's lock protocol failed; retry",
    sqlite3.SQLITE_NOLFS: "the SQLite database file is too large for this file system",
}
_UNIQUE = {sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY}


def _translate(exc: sqlite3.Error) -> StoreError:
    """The StoreError a driver error is to callers: the same class PostgreSQL's table
    (store/postgres.py, `_translate`) answers for the same cause."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # raised by the driver itself (a closed handle, a bad parameter)
        return StoreError(f"SQLite error ({type(exc).__name__})")
    if code & 0xFF in _UNAVAILABLE:
        return StoreUnavailable(_UNAVAILABLE[code & 0xFF])
    if code in _UNIQUE:
        return StoreError("a unique constraint was violated")
    return StoreError(f"SQLite error ({getattr(exc, 'sqlite_errorname', code)})")


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


def _private_database(path: Path) -> None:
    """The database's folder (0700 when made here) and the file itself, created empty and 0600 before
    SQLite opens it: SQLite creates a database with the umask (0644), and its WAL, shared-memory and
    journal files with the database's own mode. An existing file of this user and its side files lose
    their group and other bits. A file that cannot be made here is left to SQLite, whose error the
    store translates as for any other open."""
    private_dirs(path.parent)
    with contextlib.suppress(OSError):
        create_private_file(path)
        for suffix in ("-wal", "-shm", "-journal"):
            tighten(f"{path}{suffix}")


class SqliteStore(SqlStore):
    dialect = "sqlite"
    #: One writer at a time: SQLite serialises writers (BEGIN IMMEDIATE), so callers queue in-process
    #: rather than sleep in SQLite's busy handler.
    write_slots = 1

    def __init__(self, path: str | Path, *, clock: Clock | None = None, synchronous: str = "FULL",
                 busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        super().__init__(clock)
        self.path = str(path)
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise StoreError("synchronous must be FULL, EXTRA or NORMAL")
        if busy_timeout_s <= 0:
            raise StoreError("busy_timeout_s must be positive")
        self.synchronous, self.busy_timeout_s = synchronous, busy_timeout_s
        self.queries = load_queries("sqlite")
        self._local = threading.local()
        self._wakeup_folder = socket_dir(Path(self.path).resolve())
        _private_database(Path(self.path))

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = self._open()
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
            self._local.conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=self.busy_timeout_s,
                               check_same_thread=True)
        try:
            conn.execute(f"PRAGMA busy_timeout={round(self.busy_timeout_s * 1000)}")
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed transition survives power loss (NORMAL may lose the last commits).
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
        except BaseException:
            conn.close()
            raise
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
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # also when COMMIT itself failed (busy, disk full)
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise _translate(exc) from exc
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

    def close_thread_connection(self) -> None:
        self.drop_connection()  # closing a SQLite handle is the same either way

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
