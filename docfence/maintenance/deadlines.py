"""Deadline cancellation: cancel queued and rendering jobs past their deadline, in bounded batches
(a rendering attempt is ended and can no longer publish)."""

from __future__ import annotations

from dataclasses import dataclass

from docfence.core.errors import DocfenceError
from docfence.observability import metrics
from docfence.store.base import Store


@dataclass(frozen=True)
class DeadlineConfig:
    batch: int = 100

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise DocfenceError("reconciler batch must be positive")


class DeadlineCanceller:
    def __init__(self, store: Store, config: DeadlineConfig) -> None:
        self.store, self.config = store, config

    def run_once(self) -> list[str]:
        """The ids of the jobs canceled in this pass."""
        canceled = self.store.cancel_past_deadline(batch=self.config.batch)
        metrics.record_terminals(canceled)
        return [job.id for job in canceled]
