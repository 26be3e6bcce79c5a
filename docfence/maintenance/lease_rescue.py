"""Lease rescue: requeue rendering jobs whose lease expired (never one with a valid lease), or fail
them when their attempts are exhausted, in bounded batches, and count it. Expired rows the pass skips
because another session holds their lock are counted and, beyond a bound, escalated (maintenance/
skipped.py): waited for, then docfence's own holding session is terminated."""

from __future__ import annotations

from dataclasses import dataclass, field

from docfence.maintenance.batch import BatchConfig
from docfence.maintenance.skipped import SkipBound, SkippedRows
from docfence.observability import metrics
from docfence.store.base import OpsStore


@dataclass
class LeaseRescueResult:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # out of attempts: a terminal failure
    skipped_locked: list[str] = field(default_factory=list)  # expired, but another session held the row
    escalated: list[str] = field(default_factory=list)  # skipped beyond the bound, then waited for
    terminated: list[str] = field(default_factory=list)  # whose docfence holder session was terminated


class LeaseRescuer:
    PASS = "lease_expired"

    def __init__(self, store: OpsStore, config: BatchConfig, bound: SkipBound | None = None) -> None:
        self.store, self.config = store, config
        self.skips = SkippedRows(self.PASS, store.escalate_expired_lease, bound or SkipBound(),
                                 store.terminate_expired_lease_holders)

    def run_once(self) -> LeaseRescueResult:
        passed = self.store.requeue_expired_pass(batch=self.config.batch)
        skips = self.skips.handle(passed)
        moved = passed.moved + skips.moved
        result = LeaseRescueResult(skipped_locked=skips.skipped, escalated=skips.escalated,
                                   terminated=skips.terminated)
        for job in moved:
            (result.failed if job.state.terminal else result.requeued).append(job.id)
        metrics.record_reconcile(len(result.requeued), len(result.failed))
        metrics.record_terminals(moved)  # skips the requeued (non-terminal) ones
        return result
