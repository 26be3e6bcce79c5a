"""The limits every docfence PostgreSQL session runs under: server-side timeouts (idle in transaction,
lock waits, statements) and TCP liveness (keepalives, tcp_user_timeout), all shorter than a lease, so
a frozen or partitioned client can hold no row lock, and wait on no dead link, past its lease."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from docfence.core.errors import ConfigError
from docfence.core.policy import JobPolicy

#: The default lease of a job (core/policy.py). A session must not be able to keep a job's row locked,
#: or a worker blocked on a dead connection, for longer than this: the reconciler would skip the row
#: (SKIP LOCKED) and the job would outlive its lease, then its deadline.
DEFAULT_LEASE_TTL_S = JobPolicy().lease_ttl_s
#: The application_name a store's sessions carry when its caller names no role.
DEFAULT_APPLICATION_NAME = "docfence"


@dataclass(frozen=True)
class SessionLimits:
    """Per-session settings sent as libpq options (`-c name=value`) and connection parameters.

    The defaults are a third of the default lease or less: docfence never keeps a transaction open
    across a render or any other wait that is not the database's own, so a transaction idle for
    10 s belongs to a client that froze or lost its link; the server ends it (and releases its row
    locks) with a lease's worth of margin left. A lock wait past 5 s or a statement past 10 s fails
    the call (retryable) rather than holding a worker past its heartbeat. Keepalives probe a silent
    link after 5 s idle, every 2 s, 3 times (about 11 s); tcp_user_timeout drops a link whose sent
    data stays unacknowledged for 10 s. Migrations run under their own, long statement timeout.
    """

    idle_in_transaction_s: float = 10.0
    lock_timeout_s: float = 5.0
    statement_timeout_s: float = 10.0
    migration_timeout_s: float = 900.0  # statements and lock waits of a schema migration
    keepalives_idle_s: int = 5
    keepalives_interval_s: int = 2
    keepalives_count: int = 3
    tcp_user_timeout_s: float = 10.0
    connect_timeout_s: int = 10
    #: What every limit above must stay under (the lease docfence's jobs run with by default).
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S

    def __post_init__(self) -> None:
        bounded = {"idle_in_transaction_s": self.idle_in_transaction_s,
                   "lock_timeout_s": self.lock_timeout_s, "statement_timeout_s": self.statement_timeout_s,
                   "tcp_user_timeout_s": self.tcp_user_timeout_s,
                   "keepalive detection": self.keepalive_detection_s}
        for name, value in bounded.items():
            if not 0 < value < self.lease_ttl_s:
                raise ConfigError(f"PostgreSQL session limit {name} must be above 0 and below the lease "
                                  f"({self.lease_ttl_s:g} s), not {value:g}")
        if self.migration_timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ConfigError("PostgreSQL migration and connect timeouts must be positive")

    @property
    def keepalive_detection_s(self) -> float:
        """How long an idle link that went silent takes to be declared dead by keepalives."""
        return float(self.keepalives_idle_s + self.keepalives_interval_s * self.keepalives_count)

    def server_settings(self) -> dict[str, str]:
        """The server-side settings of a session, as `SHOW` reports them back (milliseconds)."""
        return {"idle_in_transaction_session_timeout": _ms(self.idle_in_transaction_s),
                "lock_timeout": _ms(self.lock_timeout_s), "statement_timeout": _ms(self.statement_timeout_s)}

    def connect_kwargs(self, url: str, application_name: str) -> dict[str, Any]:
        """psycopg.connect keyword arguments: the settings above plus whatever `options` the URL has
        (ours come last, so they win over a URL's own values of the same settings)."""
        ours = " ".join(f"-c {name}={value}" for name, value in self.server_settings().items())
        theirs = str(conninfo_to_dict(url).get("options") or "")
        return {"options": f"{theirs} {ours}".strip(), "application_name": application_name,
                "connect_timeout": self.connect_timeout_s, "keepalives": 1,
                "keepalives_idle": self.keepalives_idle_s, "keepalives_interval": self.keepalives_interval_s,
                "keepalives_count": self.keepalives_count,
                "tcp_user_timeout": int(self.tcp_user_timeout_s * 1000)}

    def migration_settings(self) -> dict[str, str]:
        """SET LOCAL values for a migration's transaction: its statements and its wait for the
        migration lock (another starter migrating) may take long."""
        long = _ms(self.migration_timeout_s)
        return {"statement_timeout": long, "lock_timeout": long, "idle_in_transaction_session_timeout": long}


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"
