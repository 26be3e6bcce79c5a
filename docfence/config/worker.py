"""`[worker]`: how a worker holds its lease, polls and shuts down, with the DOCFENCE_* worker variables."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from docfence.config.tables import from_env, section
from docfence.core.errors import ConfigError

#: Environment variable -> `[worker]` key it overrides.
WORKER_ENV = {
    "DOCFENCE_LEASE_TTL_S": "lease_ttl_s",
    "DOCFENCE_HEARTBEAT_INTERVAL_S": "heartbeat_interval_s",
    "DOCFENCE_WORKER_BATCH": "batch",
    "DOCFENCE_POLL_INTERVAL_S": "poll_interval_s",
    "DOCFENCE_RECONCILE_INTERVAL_S": "reconcile_interval_s",
    "DOCFENCE_SHUTDOWN_GRACE_S": "shutdown_grace_s",
}


@dataclass(frozen=True)
class WorkerConfig:
    lease_ttl_s: float = 30.0
    heartbeat_interval_s: float = 5.0
    batch: int = 1  # rendering is heavy: a claimed-but-waiting job only delays its rescue
    poll_interval_s: float = 1.0
    shutdown_grace_s: float = 10.0
    reconcile_in_process: bool = True
    reconcile_interval_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_interval_s < self.lease_ttl_s / 2:
            raise ConfigError(f"heartbeat_interval_s={self.heartbeat_interval_s!r}: must be positive and "
                              f"under half of lease_ttl_s={self.lease_ttl_s!r}")
        for name in ("batch", "poll_interval_s", "reconcile_interval_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be positive")


def worker_from(table: Any, env: dict[str, str]) -> WorkerConfig:
    """[worker] with the DOCFENCE_* worker variables on top; a bad combination names where each came from."""
    table = dict(table) if isinstance(table, dict) else table
    names = {f.name: str(f.type) for f in fields(WorkerConfig)}
    given_env = {}
    for var, name in WORKER_ENV.items():
        if env.get(var):
            given_env[name] = (var, from_env(var, env[var], names[name]))
    try:
        base: WorkerConfig = section(WorkerConfig, "[worker]", table)
        if given_env:
            return replace(base, **{name: value for name, (_, value) in given_env.items()})
        return base
    except ConfigError as exc:
        given = ", ".join(f"{var}={env[var]!r}" for var, _ in given_env.values())
        raise ConfigError(f"{exc.message}{f' (with {given})' if given else ''}") from None
