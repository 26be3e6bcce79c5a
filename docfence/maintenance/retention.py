"""Retention: delete the bytes of terminal jobs whose retention expired (their metadata stays as a
tombstone), in bounded batches."""

from __future__ import annotations

from dataclasses import dataclass

from docfence.blobs.regions import RegionRouter
from docfence.core.errors import DocfenceError
from docfence.maintenance.deletion import DeletionService
from docfence.store.base import Store


@dataclass(frozen=True)
class RetentionConfig:
    batch: int = 100

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise DocfenceError("reconciler batch must be positive")


class RetentionEnforcer:
    def __init__(self, store: Store, regions: RegionRouter, config: RetentionConfig) -> None:
        self.deletion, self.config = DeletionService(store, regions), config

    def run_once(self) -> list[str]:
        """The ids of the jobs whose bytes were deleted in this pass."""
        return [report.job_id for report in self.deletion.enforce_retention(batch=self.config.batch)]
