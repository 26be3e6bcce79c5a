"""Lease rescue: requeue rendering jobs whose lease expired (never one with a valid lease), or fail
them when their attempts are exhausted, in bounded batches, and count it."""

from __future__ import annotations

from dataclasses import dataclass, field

from docfence.maintenance.batch import BatchConfig
from docfence.observability import metrics
from docfence.store.base import OpsStore


@dataclass
class LeaseRescueResult:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # out of attempts: a terminal failure


class LeaseRescuer:
    def __init__(self, store: OpsStore, config: BatchConfig) -> None:
        self.store, self.config = store, config

    def run_once(self) -> LeaseRescueResult:
        result = LeaseRescueResult()
        moved = self.store.requeue_expired(batch=self.config.batch)
        for job in moved:
            (result.failed if job.state.terminal else result.requeued).append(job.id)
        metrics.record_reconcile(len(result.requeued), len(result.failed))
        metrics.record_terminals(moved)  # skips the requeued (non-terminal) ones
        return result
