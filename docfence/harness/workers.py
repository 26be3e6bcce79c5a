"""`docfence worker` processes for benchmarks and tests: started with a given environment, waited for
and stopped with real signals."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docfence.config.environment import environment
from docfence.core.clock import monotonic
from docfence.core.interpreter import module_command

REPO = Path(__file__).resolve().parents[2]


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
        return subprocess.Popen(module_command("docfence.cli", "worker", *args), env=env,
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
