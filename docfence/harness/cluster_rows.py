"""Reads a fault run's evidence straight from the database with plain SQL (psycopg or sqlite3), not
through docfence's store: job rows, artifact rows, attempts, commit audit events, the server clock,
and which PostgreSQL sessions sit idle in a transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from docfence.core.clock import utcnow

__all__ = ["ArtifactRow", "JobRow", "Rows"]


@dataclass(frozen=True)
class JobRow:
    id: str
    state: str
    attempt: int
    deadline_at: datetime
    finished_at: datetime | None
    error_code: str | None
    input_key: str | None
    region: str


@dataclass(frozen=True)
class ArtifactRow:
    job_id: str
    attempt: int
    key: str
    sha256: str


def _ts(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(float(value), tz=UTC)  # SQLite keeps epoch seconds


@dataclass(frozen=True)
class Rows:
    db_url: str

    @property
    def postgres(self) -> bool:
        return self.db_url.startswith("postgresql")

    @contextmanager
    def _query(self) -> Iterator[Any]:
        """A cursor-like object whose rows are dicts, on a fresh connection."""
        if self.postgres:
            with psycopg.connect(self.db_url, autocommit=True, row_factory=dict_row,
                                 connect_timeout=5) as conn:
                yield conn
        else:
            path = self.db_url.removeprefix("sqlite:///")
            with closing(sqlite3.connect(path, timeout=30)) as conn:
                conn.row_factory = sqlite3.Row
                yield conn

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        if not self.postgres:
            sql = sql.replace("%s", "?")
        with self._query() as conn:
            return [dict(r) for r in conn.execute(sql, params).fetchall()]

    def jobs(self) -> dict[str, JobRow]:
        rows = self._all("SELECT id, state, attempt, deadline_at, finished_at, last_error_code, input_key, "
                         "region FROM jobs")
        return {r["id"]: JobRow(r["id"], r["state"], int(r["attempt"]), _ts(r["deadline_at"]) or utcnow(),
                                _ts(r["finished_at"]), r["last_error_code"], r["input_key"], r["region"])
                for r in rows}

    def job_by_key(self, idempotency_key: str) -> str | None:
        """The id of the committed job with this idempotency key, if any."""
        rows = self._all("SELECT id FROM jobs WHERE idempotency_key = %s", (idempotency_key,))
        return str(rows[0]["id"]) if rows else None

    def row_locked(self, job_id: str) -> bool:
        """Whether another session holds the job row's lock (PostgreSQL; probed without waiting)."""
        try:
            self._all("SELECT id FROM jobs WHERE id = %s FOR NO KEY UPDATE NOWAIT", (job_id,))
        except psycopg.errors.LockNotAvailable:
            return True
        return False

    def artifacts(self) -> dict[str, ArtifactRow]:
        rows = self._all("SELECT job_id, attempt, storage_key, sha256 FROM artifacts")
        return {r["job_id"]: ArtifactRow(r["job_id"], int(r["attempt"]), r["storage_key"], r["sha256"])
                for r in rows}

    def commits(self) -> dict[str, int]:
        """How many `artifact_committed` audit events each job has (a second one is a stale publish)."""
        rows = self._all("SELECT job_id, count(*) AS n FROM audit_events WHERE action = 'artifact_committed' "
                         "GROUP BY job_id")
        return {r["job_id"]: int(r["n"]) for r in rows}

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        return self._all("SELECT attempt, worker, claimed_at, ended_at, outcome, error_code FROM attempts "
                         "WHERE job_id = %s ORDER BY attempt", (job_id,))

    def now(self) -> datetime:
        """The store's clock: PostgreSQL's now(); SQLite's is this host's."""
        if not self.postgres:
            return utcnow()
        value = self._all("SELECT now() AS now")[0]["now"]
        assert isinstance(value, datetime)
        return value

    def backend_states(self, client_ports: list[int]) -> list[str]:
        """pg_stat_activity.state of the sessions whose client port is one of `client_ports`."""
        if not client_ports:
            return []
        rows = self._all("SELECT state FROM pg_stat_activity WHERE client_port = ANY(%s)", (client_ports,))
        return [str(r["state"]) for r in rows]
