"""The reconciler: requeue expired leases, fail jobs out of attempts, cancel jobs past their deadline,
delete orphaned staging objects. Every pass is bounded, idempotent and safe on many machines at once
(the store's fenced predicates and SKIP LOCKED make concurrent passes harmless)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from docfence.blobs.regions import RegionRouter
from docfence.core.clock import monotonic
from docfence.core.errors import DocfenceError, NotFound
from docfence.layout import attempt_of_staging_key
from docfence.maintenance.deletion import DeletionService
from docfence.observability import metrics
from docfence.store.base import Store

log = logging.getLogger("docfence.reconciler")


@dataclass(frozen=True)
class ReconcileConfig:
    batch: int = 100
    interval_s: float = 2.0
    gc_batch: int = 500  # objects examined per region per garbage-collection pass
    gc_interval_s: float = 10.0  # listing storage is costlier than the indexed queries


@dataclass
class ReconcileResult:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    canceled: list[str] = field(default_factory=list)
    staging_deleted: list[str] = field(default_factory=list)
    retention_deleted: list[str] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return (len(self.requeued) + len(self.failed) + len(self.canceled) + len(self.staging_deleted)
                + len(self.retention_deleted))


class Reconciler:
    def __init__(self, store: Store, regions: RegionRouter | None, config: ReconcileConfig) -> None:
        if config.batch < 1 or config.interval_s <= 0:
            raise DocfenceError("reconciler batch and interval must be positive")
        self.store, self.regions, self.config = store, regions, config
        self._cursor: dict[str, str] = {}  # per region: the last key examined, so passes take turns
        self._last_gc = float("-inf")

    def run_once(self) -> ReconcileResult:
        result = ReconcileResult()
        expired = self.store.requeue_expired(batch=self.config.batch)
        for job in expired:
            (result.failed if job.state.terminal else result.requeued).append(job.id)
        canceled = self.store.cancel_past_deadline(batch=self.config.batch)
        result.canceled = [j.id for j in canceled]
        metrics.record_reconcile(len(result.requeued), len(result.failed))
        metrics.record_terminals([*expired, *canceled])  # skips the requeued (non-terminal) ones
        if self.regions is not None:
            deletion = DeletionService(self.store, self.regions)
            result.retention_deleted = [r.job_id for r in deletion.enforce_retention(batch=self.config.batch)]
            if monotonic() - self._last_gc >= self.config.gc_interval_s:
                self._last_gc = monotonic()
                result.staging_deleted = self.collect_orphans()
        if result.changed:
            log.info("reconciled: %d requeued, %d failed, %d canceled, %d orphans deleted",
                     len(result.requeued), len(result.failed), len(result.canceled),
                     len(result.staging_deleted))
        return result

    def collect_orphans(self) -> list[str]:
        """Delete objects nobody may keep: any object of a deleted job, attempts older than the job's
        current attempt, and any attempt of a terminal job other than the committed one. Examines at
        most gc_batch objects per region, continuing where the previous pass stopped."""
        deleted: list[str] = []
        assert self.regions is not None
        verdicts: dict[tuple[str, int | None], bool] = {}
        for region in self.regions.approved():
            blobs = self.regions.for_region(region)
            cursor, examined, last = self._cursor.get(region, ""), 0, ""
            for key in blobs.list("jobs"):
                if key <= cursor:
                    continue
                examined, last = examined + 1, key
                probe = (key.split("/")[2], attempt_of_staging_key(key))
                if probe not in verdicts:
                    verdicts[probe] = self._is_orphan(*probe)
                if verdicts[probe]:
                    blobs.delete(key)
                    deleted.append(key)
                if examined >= self.config.gc_batch:
                    break
            self._cursor[region] = last if examined >= self.config.gc_batch else ""
        return deleted

    def _is_orphan(self, job_id: str, attempt: int | None) -> bool:
        """Deleted jobs own no bytes at all; otherwise only attempt objects can be orphans."""
        try:
            job = self.store.get(job_id)
        except NotFound:
            return attempt is not None  # an input uploaded just before its job row commits is not
        if job.deleted_at is not None:
            return True
        if attempt is None:
            return False
        if not job.state.terminal:
            return attempt < job.attempt
        artifact = self.store.artifact(job_id)
        return artifact is None or artifact.attempt != attempt

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.run_once()
            except DocfenceError as exc:
                log.warning("reconcile pass failed: %s", exc.code)
            stop.wait(self.config.interval_s)
