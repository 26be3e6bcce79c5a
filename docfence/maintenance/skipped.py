"""Rows the reconciler's passes skip because another session holds their lock (PostgreSQL's SKIP
LOCKED): each is logged when first seen, counted every pass, and escalated once it has been skipped
beyond a bound: moved by a fenced transition that waits, briefly, for that one row's lock; when the
lock is still held after that wait, docfence's own holding sessions are terminated (their attempt is
fenced out already) and the transition is applied; another client's session is reported, never ended."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from docfence.core.errors import ConfigError, StoreError, StoreUnavailable
from docfence.core.records import Job
from docfence.observability import metrics
from docfence.store.passes import HolderVerdict, PassResult, SkippedRow

log = logging.getLogger("docfence.reconciler")


@dataclass(frozen=True)
class SkipBound:
    """When a skipped row is escalated: skipped in `passes` consecutive passes, or for longer than the
    job's lease by the store's clock, whichever comes first. An escalation waits at most
    `lock_timeout_s` for the row's lock; if it is still held, it terminates docfence's own holders
    (waiting at most `terminate_wait_s` for each to exit) and waits `lock_timeout_s` once more. A pass
    escalates at most `max_per_pass` rows, so it stays bounded (at most max_per_pass *
    (2 * lock_timeout_s + terminate_wait_s) of waiting)."""

    passes: int = 3
    lock_timeout_s: float = 1.0
    max_per_pass: int = 5
    terminate_wait_s: float = 2.0

    def __post_init__(self) -> None:
        if self.passes < 1 or self.lock_timeout_s <= 0 or self.max_per_pass < 1 or self.terminate_wait_s <= 0:
            raise ConfigError("skip bound: passes and max_per_pass must be >= 1, lock_timeout_s and "
                              "terminate_wait_s positive")


@dataclass
class _Seen:
    first_at: datetime  # the store's clock when the row was first seen skipped
    passes: int = 1


@dataclass
class SkipOutcome:
    skipped: list[str] = field(default_factory=list)  # ids of the rows this pass skipped for a lock
    escalated: list[str] = field(default_factory=list)  # ids whose lock an escalation obtained
    moved: list[Job] = field(default_factory=list)  # what the escalations moved
    terminated: list[str] = field(default_factory=list)  # ids whose docfence holder was terminated
    reported: list[str] = field(default_factory=list)  # ids held by another client's session (not ended)


class SkippedRows:
    """One pass's tracker. `escalate(job_id, attempt, lock_timeout_s)` is the store's waiting
    transition for that pass; it answers None when the row no longer needs it. `terminate(job_id,
    attempt, wait_s)` ends docfence's own sessions holding the row while it is still due (the store's
    `terminate_*_holders`); without it, an escalation only waits."""

    def __init__(self, pass_name: str, escalate: Callable[..., Job | None], bound: SkipBound,
                 terminate: Callable[..., list[HolderVerdict]] | None = None) -> None:
        self.pass_name, self.escalate, self.bound, self.terminate = pass_name, escalate, bound, terminate
        self._seen: dict[tuple[str, int], _Seen] = {}

    def handle(self, result: PassResult) -> SkipOutcome:
        """Record the rows `result` skipped, escalate those beyond the bound, and count both (a row
        whose holder was terminated counts as escalated, whether or not the lock came free in time)."""
        out = SkipOutcome(skipped=[row.job_id for row in result.skipped])
        for row in self._beyond_bound(result.skipped, result.now)[: self.bound.max_per_pass]:
            got, job = self._escalate(row, out)
            if not got:
                continue
            self._seen.pop((row.job_id, row.attempt), None)
            out.escalated.append(row.job_id)
            if job is not None:
                out.moved.append(job)
            log.warning("%s pass: escalated job %s attempt %d after waiting for its row lock: %s",
                        self.pass_name, row.job_id, row.attempt,
                        f"now {job.state.value}" if job else "its holder had moved it already",
                        extra={"job_id": row.job_id, "attempt": row.attempt})
        escalated = len(set(out.escalated) | set(out.terminated))
        metrics.record_skipped_locked(self.pass_name, len(out.skipped), escalated=escalated)
        return out

    def _escalate(self, row: SkippedRow, out: SkipOutcome) -> tuple[bool, Job | None]:
        """Wait for the row's lock; if still held, terminate docfence's holders and wait once more.
        (whether the lock was obtained, what the transition moved); not obtained: a later pass retries."""
        got, job = self._wait_and_move(row, retrying=self.terminate is None)
        if got or self.terminate is None:
            return got, job
        try:
            verdicts = self.terminate(row.job_id, row.attempt, wait_s=self.bound.terminate_wait_s)
        except StoreError as exc:  # e.g. permission denied: the holder runs as another role
            log.warning("%s pass: could not terminate the session holding job %s attempt %d: %s; retrying "
                        "next pass", self.pass_name, row.job_id, row.attempt, exc,
                        extra={"job_id": row.job_id, "attempt": row.attempt})
            return False, None
        self._log_verdicts(row, verdicts, out)
        if not any(v.terminated for v in verdicts):
            return False, None
        return self._wait_and_move(row, retrying=True)

    def _wait_and_move(self, row: SkippedRow, *, retrying: bool) -> tuple[bool, Job | None]:
        try:
            return True, self.escalate(row.job_id, row.attempt, lock_timeout_s=self.bound.lock_timeout_s)
        except StoreUnavailable as exc:
            log.warning("%s pass: job %s attempt %d is still locked after %g s of waiting (%s)%s",
                        self.pass_name, row.job_id, row.attempt, self.bound.lock_timeout_s, exc.code,
                        "; retrying next pass" if retrying else "",
                        extra={"job_id": row.job_id, "attempt": row.attempt})
            return False, None

    def _log_verdicts(self, row: SkippedRow, verdicts: Sequence[HolderVerdict], out: SkipOutcome) -> None:
        ids = {"job_id": row.job_id, "attempt": row.attempt}
        for v in verdicts:
            h = v.holder
            if v.terminated:
                out.terminated.append(row.job_id)
                log.warning("%s pass: terminated database session %d (%s, %s for %.1f s) holding job %s "
                            "attempt %d's row lock past its %s; its transaction is rolled back",
                            self.pass_name, h.pid, h.application_name, h.state, h.state_s, row.job_id,
                            row.attempt, "deadline" if self.pass_name == "deadline_reached" else "lease",
                            extra={**ids, "pid": h.pid, "application_name": h.application_name})
            elif v.own:
                log.warning("%s pass: database session %d (%s) holding job %s attempt %d was signalled "
                            "but did not exit within %g s", self.pass_name, h.pid, h.application_name,
                            row.job_id, row.attempt, self.bound.terminate_wait_s,
                            extra={**ids, "pid": h.pid, "application_name": h.application_name})
            else:
                out.reported.append(row.job_id)
                log.warning("%s pass: job %s attempt %d is held by database session %d (%s, %s for %.1f s), "
                            "not a docfence session: not terminated; end that transaction (see `docfence "
                            "inspect %s`)", self.pass_name, row.job_id, row.attempt, h.pid,
                            h.application_name or "no application_name", h.state, h.state_s, row.job_id,
                            extra={**ids, "pid": h.pid, "application_name": h.application_name})

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
