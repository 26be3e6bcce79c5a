"""Outages of the job store and the blob store met inside one attempt: retried with capped, jittered
exponential back-off while the lease holds and the job's deadline is ahead, so an outage spends no
attempt (attempts count document work). Deterministic errors pass through at once.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from docfence.core.clock import monotonic
from docfence.core.errors import BlobError, ConfigError, DocfenceError, LeaseLost, StoreUnavailable
from docfence.core.records import Claim
from docfence.observability import metrics
from docfence.worker.leases import Lease

log = logging.getLogger("docfence.worker")

T = TypeVar("T")
WAIT_SLICE_S = 0.25  # a wait also ends this soon after shutdown's grace runs out (lease loss ends it at once)


@dataclass(frozen=True)
class Backoff:
    """Delays between tries: `first_s`, doubling up to `cap_s`, each drawn from [delay/2, delay]."""

    first_s: float = 0.2
    cap_s: float = 5.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.cap_s or self.factor < 1:
            raise ConfigError(f"back-off {self!r}: needs 0 < first_s <= cap_s and factor >= 1")

    def delay(self, tries: int, rng: random.Random) -> float:
        """The wait after `tries` failed tries (0 for the first failure)."""
        base = min(self.cap_s, self.first_s * self.factor ** min(tries, 64))
        return base / 2 + rng.uniform(0, base / 2)


class OutageOutlasted(Exception):
    """The outage outlasted what this attempt may wait for: `why` is "deadline" (the job's deadline
    came: the reconciler's deadline pass ends the job) or "shutdown" (the grace period ran out)."""

    def __init__(self, why: str, error: DocfenceError) -> None:
        self.why, self.error = why, error
        super().__init__(f"{why} reached during an outage ({error.code})")


def outage_target(exc: BaseException) -> str | None:
    """"storage" or "store" when `exc` is a transient fault of that infrastructure; None otherwise
    (object not found, integrity, documents, stale attempts: retrying would not help)."""
    if isinstance(exc, StoreUnavailable):
        return "store"
    if isinstance(exc, BlobError) and exc.retryable:
        return "storage"
    return None


def deadline_budget_s(claim: Claim) -> float:
    """Seconds from the claim to the job's deadline, both on the store's clock (never this host's)."""
    job = claim.job
    claimed = job.claimed_at or (claim.lease_expires_at - timedelta(seconds=job.policy.lease_ttl_s))
    return (job.deadline_at - claimed).total_seconds()


@dataclass
class OutageRetry:
    """Retries one attempt's calls to the store and the blob store through outages. Waits end at once
    when the lease is lost (they wait on `lease.lost`) and soon after `give_up()` turns true."""

    ctx: dict[str, Any]
    lease: Lease
    budget_end: float  # monotonic time of the job's deadline
    backoff: Backoff = field(default_factory=Backoff)
    give_up: Callable[[], bool] = lambda: False
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def for_claim(cls, claim: Claim, lease: Lease, backoff: Backoff,
                  give_up: Callable[[], bool]) -> OutageRetry:
        ctx = {"job_id": claim.job.id, "attempt": claim.attempt}
        return cls(ctx, lease, monotonic() + deadline_budget_s(claim), backoff, give_up)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()`, retried while it raises a transient outage error. Raises LeaseLost when the lease
        is lost meanwhile, OutageOutlasted at the deadline or shutdown, any other error as is."""
        tries = 0
        while True:
            try:
                result = fn()
            except (BlobError, StoreUnavailable) as exc:
                target = outage_target(exc)
                if target is None:
                    raise
                self._wait(what, target, exc, tries)
                tries += 1
                continue
            if tries:
                log.info("%s works again after %d retries", what, tries, extra=self.ctx)
            return result

    def _wait(self, what: str, target: str, exc: DocfenceError, tries: int) -> None:
        self._check(exc)
        metrics.record_infra_retry(target, exc.code)
        if tries == 0:  # one line per outage, not one per try
            log.warning("%s outage (%s) while %s: retrying within the attempt until the deadline",
                        target, exc.code, what, extra=self.ctx)
        end = min(monotonic() + self.backoff.delay(tries, self.rng), self.budget_end)
        while (left := end - monotonic()) > 0:
            if self.lease.lost.wait(min(left, WAIT_SLICE_S)) or self.give_up():
                break
        self._check(exc)

    def _check(self, exc: DocfenceError) -> None:
        if self.lease.lost.is_set():
            raise LeaseLost(f"lease lost during an outage ({exc.code})") from exc
        if monotonic() >= self.budget_end:
            raise OutageOutlasted("deadline", exc) from exc
        if self.give_up():
            raise OutageOutlasted("shutdown", exc) from exc
