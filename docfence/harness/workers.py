"""What benchmarks (and tests) need to run docfence for real: throwaway PostgreSQL databases and
worker processes started with a given environment, waited for and stopped with real signals."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from docfence.config import admin_database_url, environment
from docfence.core.clock import monotonic

REPO = Path(__file__).resolve().parents[2]


def pg_url_for(dbname: str) -> str:
    base, _, _ = admin_database_url().rpartition("/")
    return f"{base}/{dbname}"


@contextmanager
def temporary_pg_database(prefix: str = "docfence_test") -> Iterator[str]:
    """Create an empty database, yield its URL, drop it afterwards."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(admin_database_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_url_for(name)
    finally:
        with psycopg.connect(admin_database_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def worker_env(db_url: str, storage_url: str, **extra: str) -> dict[str, str]:
    """An environment for `docfence worker` with short leases, so faults resolve in seconds."""
    env = environment()
    env.update({
        "DOCFENCE_DATABASE_URL": db_url, "DOCFENCE_STORAGE_URL": storage_url,
        "DOCFENCE_LEASE_TTL_S": "2", "DOCFENCE_HEARTBEAT_INTERVAL_S": "0.4",
        "DOCFENCE_RECONCILE_INTERVAL_S": "0.3", "DOCFENCE_POLL_INTERVAL_S": "0.1",
        "DOCFENCE_SHUTDOWN_GRACE_S": "3", "PYTHONPATH": str(REPO),
    })
    env.pop("DOCFENCE_FAULTS", None)
    env.update(extra)
    return env


def start_worker(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "docfence.cli", "worker", *args], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    end = monotonic() + timeout
    while monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)
