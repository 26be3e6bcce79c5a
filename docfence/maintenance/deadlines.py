"""Deadline cancellation: cancel queued and rendering jobs past their deadline, in bounded batches
(a rendering attempt is ended and can no longer publish). Rows the pass skips because another session
holds their lock are counted and, beyond a bound, escalated (maintenance/skipped.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from docfence.maintenance.batch import BatchConfig
from docfence.maintenance.skipped import SkipBound, SkippedRows
from docfence.observability import metrics
from docfence.store.base import OpsStore


@dataclass
class DeadlineResult:
    canceled: list[str] = field(default_factory=list)
    skipped_locked: list[str] = field(default_factory=list)  # past deadline, but another session held the row
    escalated: list[str] = field(default_factory=list)  # skipped beyond the bound, then waited for
    terminated: list[str] = field(default_factory=list)  # whose docfence holder session was terminated


class DeadlineCanceller:
    PASS = "deadline_reached"

    def __init__(self, store: OpsStore, config: BatchConfig, bound: SkipBound | None = None) -> None:
        self.store, self.config = store, config
        self.skips = SkippedRows(self.PASS, store.escalate_past_deadline, bound or SkipBound(),
                                 store.terminate_past_deadline_holders)

    def run_once(self) -> list[str]:
        """The ids of the jobs canceled in this pass."""
        return self.run_pass().canceled

    def run_pass(self) -> DeadlineResult:
        """One pass: what it canceled, what it skipped for a lock, what it escalated."""
        passed = self.store.cancel_past_deadline_pass(batch=self.config.batch)
        skips = self.skips.handle(passed)
        canceled = passed.moved + skips.moved
        metrics.record_terminals(canceled)
        return DeadlineResult(canceled=[job.id for job in canceled], skipped_locked=skips.skipped,
                              escalated=skips.escalated, terminated=skips.terminated)
