"""Rows the reconciler's passes skip because another session holds their lock (PostgreSQL's SKIP
LOCKED): each is logged when first seen, counted every pass, and escalated once it has been skipped
beyond a bound: moved by a fenced transition that waits, briefly, for that one row's lock."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from docfence.core.errors import ConfigError, StoreUnavailable
from docfence.core.records import Job
from docfence.observability import metrics
from docfence.store.passes import PassResult, SkippedRow

log = logging.getLogger("docfence.reconciler")


@dataclass(frozen=True)
class SkipBound:
    """When a skipped row is escalated: skipped in `passes` consecutive passes, or for longer than the
    job's lease by the store's clock, whichever comes first. An escalation waits at most
    `lock_timeout_s` for the row's lock, and a pass escalates at most `max_per_pass` rows, so a pass
    stays bounded (at most max_per_pass * lock_timeout_s of waiting)."""

    passes: int = 3
    lock_timeout_s: float = 1.0
    max_per_pass: int = 5

    def __post_init__(self) -> None:
        if self.passes < 1 or self.lock_timeout_s <= 0 or self.max_per_pass < 1:
            raise ConfigError("skip bound: passes and max_per_pass must be >= 1, lock_timeout_s positive")


@dataclass
class _Seen:
    first_at: datetime  # the store's clock when the row was first seen skipped
    passes: int = 1


@dataclass
class SkipOutcome:
    skipped: list[str] = field(default_factory=list)  # ids of the rows this pass skipped for a lock
    escalated: list[str] = field(default_factory=list)  # ids whose lock an escalation obtained
    moved: list[Job] = field(default_factory=list)  # what the escalations moved


class SkippedRows:
    """One pass's tracker. `escalate(job_id, attempt, lock_timeout_s)` is the store's waiting
    transition for that pass; it answers None when the row no longer needs it."""

    def __init__(self, pass_name: str, escalate: Callable[..., Job | None], bound: SkipBound) -> None:
        self.pass_name, self.escalate, self.bound = pass_name, escalate, bound
        self._seen: dict[tuple[str, int], _Seen] = {}

    def handle(self, result: PassResult) -> SkipOutcome:
        """Record the rows `result` skipped, escalate those beyond the bound, and count both."""
        out = SkipOutcome(skipped=[row.job_id for row in result.skipped])
        for row in self._beyond_bound(result.skipped, result.now)[: self.bound.max_per_pass]:
            try:
                job = self.escalate(row.job_id, row.attempt, lock_timeout_s=self.bound.lock_timeout_s)
            except StoreUnavailable as exc:
                log.warning("%s pass: job %s attempt %d is still locked after %g s of waiting (%s); "
                            "retrying next pass", self.pass_name, row.job_id, row.attempt,
                            self.bound.lock_timeout_s, exc.code,
                            extra={"job_id": row.job_id, "attempt": row.attempt})
                continue
            self._seen.pop((row.job_id, row.attempt), None)
            out.escalated.append(row.job_id)
            if job is not None:
                out.moved.append(job)
            log.warning("%s pass: escalated job %s attempt %d after waiting for its row lock: %s",
                        self.pass_name, row.job_id, row.attempt,
                        f"now {job.state.value}" if job else "its holder had moved it already",
                        extra={"job_id": row.job_id, "attempt": row.attempt})
        metrics.record_skipped_locked(self.pass_name, len(out.skipped), escalated=len(out.escalated))
        return out

    def _beyond_bound(self, skipped: Sequence[SkippedRow], now: datetime | None) -> list[SkippedRow]:
        """Update the consecutive sightings; a row not skipped this pass is forgotten."""
        seen: dict[tuple[str, int], _Seen] = {}
        due = []
        for row in skipped:
            key = (row.job_id, row.attempt)
            prior = self._seen.get(key)
            if prior is None:
                assert now is not None  # a pass that skipped rows read the store's clock with them
                prior = _Seen(first_at=now, passes=0)
                log.warning("%s pass skipped job %s attempt %d: another database session holds its row "
                            "lock (see `docfence inspect %s`)", self.pass_name, row.job_id, row.attempt,
                            row.job_id, extra={"job_id": row.job_id, "attempt": row.attempt})
            current = _Seen(prior.first_at, prior.passes + 1)
            seen[key] = current
            held_s = (now - current.first_at).total_seconds() if now is not None else 0.0
            if current.passes >= self.bound.passes or held_s >= row.lease_ttl_s:
                due.append(row)
        self._seen = seen
        return due
