"""Retention: delete the bytes of terminal jobs whose retention expired (their metadata stays as a
tombstone), in bounded batches."""

from __future__ import annotations

from docfence.blobs.regions import RegionRouter
from docfence.maintenance.batch import BatchConfig
from docfence.maintenance.deletion import DeletionService, DeletionStore


class RetentionEnforcer:
    def __init__(self, store: DeletionStore, regions: RegionRouter, config: BatchConfig) -> None:
        self.deletion, self.config = DeletionService(store, regions), config

    def run_once(self) -> list[str]:
        """The ids of the jobs whose bytes were deleted in this pass."""
        return [report.job_id for report in self.deletion.enforce_retention(batch=self.config.batch)]
