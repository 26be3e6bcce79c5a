"""Deadline cancellation: cancel queued and rendering jobs past their deadline, in bounded batches
(a rendering attempt is ended and can no longer publish)."""

from __future__ import annotations

from docfence.maintenance.batch import BatchConfig
from docfence.observability import metrics
from docfence.store.base import OpsStore


class DeadlineCanceller:
    def __init__(self, store: OpsStore, config: BatchConfig) -> None:
        self.store, self.config = store, config

    def run_once(self) -> list[str]:
        """The ids of the jobs canceled in this pass."""
        canceled = self.store.cancel_past_deadline(batch=self.config.batch)
        metrics.record_terminals(canceled)
        return [job.id for job in canceled]
