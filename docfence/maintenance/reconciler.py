"""The reconciler: one loop over the maintenance services (lease rescue, deadline cancellation,
retention, staging collection, the data keys' rewrap after a rotation), each a config plus
`run_once()`. Every pass is bounded, idempotent and safe on many machines at once (the store's fenced
predicates and SKIP LOCKED make concurrent passes harmless)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Protocol

from docfence.blobs.regions import RegionRouter
from docfence.core import loops
from docfence.core.clock import monotonic
from docfence.core.errors import DocfenceError
from docfence.maintenance.batch import BatchConfig
from docfence.maintenance.deadlines import DeadlineCanceller
from docfence.maintenance.lease_rescue import LeaseRescuer
from docfence.maintenance.retention import RetentionEnforcer
from docfence.maintenance.rewrap import Rewrapper, RewrapResult
from docfence.maintenance.staging import TEMP_MIN_AGE_S, StagingCollector, StagingConfig
from docfence.observability import metrics
from docfence.store.base import AuditLog, JobStore, OpsStore


class ReconcilerStore(JobStore, OpsStore, AuditLog, Protocol):
    """What the reconciler's services use together: lease and deadline passes and deletion (operations,
    audit) and the job reads that staging collection checks objects against."""


log = logging.getLogger("docfence.reconciler")
__all__ = ["TEMP_MIN_AGE_S", "ReconcileConfig", "ReconcileResult", "Reconciler"]


@dataclass(frozen=True)
class ReconcileConfig:
    batch: int = 100
    interval_s: float = 2.0
    gc_batch: int = 500  # objects examined per region per garbage-collection pass
    gc_interval_s: float = 10.0  # listing storage is costlier than the indexed queries
    staging_grace_s: float = 60.0  # see StagingConfig
    # Walking a whole local folder for temp files is costly, hence its own, slower interval.
    temp_interval_s: float = 600.0


@dataclass
class ReconcileResult:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    canceled: list[str] = field(default_factory=list)
    staging_deleted: list[str] = field(default_factory=list)
    retention_deleted: list[str] = field(default_factory=list)
    temp_deleted: int = 0  # temp files of interrupted writes removed
    # per pass (lease_expired, deadline_reached): ids of due rows skipped because another session held
    # their row lock, and of those skipped beyond the bound then moved by waiting for the lock
    skipped_locked: dict[str, list[str]] = field(default_factory=dict)
    escalated: dict[str, list[str]] = field(default_factory=dict)
    rewrap: RewrapResult | None = None  # None: no rewrap pass was due (or none is configured)

    @property
    def changed(self) -> int:
        return (len(self.requeued) + len(self.failed) + len(self.canceled) + len(self.staging_deleted)
                + len(self.retention_deleted) + self.temp_deleted)


class Reconciler:
    def __init__(self, store: ReconcilerStore, regions: RegionRouter | None, config: ReconcileConfig, *,
                 rewrapper: Rewrapper | None = None) -> None:
        if config.interval_s <= 0:
            raise DocfenceError("reconciler interval must be positive")
        self.store, self.regions, self.config = store, regions, config
        self.rewrapper = rewrapper  # None: data keys are not re-wrapped by this reconciler
        rows = BatchConfig(batch=config.batch)
        self.leases = LeaseRescuer(store, rows)
        self.deadlines = DeadlineCanceller(store, rows)
        staging = StagingConfig(gc_batch=config.gc_batch, staging_grace_s=config.staging_grace_s)
        # without blob stores (regions) only the row-level services run
        self.retention = RetentionEnforcer(store, regions, rows) if regions else None
        self.staging = StagingCollector(store, regions, staging) if regions else None
        self._last_gc = self._last_temp_gc = float("-inf")

    def run_once(self) -> ReconcileResult:
        rescued, late = self.leases.run_once(), self.deadlines.run_pass()
        result = ReconcileResult(
            requeued=rescued.requeued, failed=rescued.failed, canceled=late.canceled,
            skipped_locked={LeaseRescuer.PASS: rescued.skipped_locked,
                            DeadlineCanceller.PASS: late.skipped_locked},
            escalated={LeaseRescuer.PASS: rescued.escalated, DeadlineCanceller.PASS: late.escalated})
        if self.retention is not None and self.staging is not None:
            result.retention_deleted = self.retention.run_once()
            if monotonic() - self._last_gc >= self.config.gc_interval_s:
                self._last_gc = monotonic()
                result.staging_deleted = self.staging.collect_orphans()
            if monotonic() - self._last_temp_gc >= self.config.temp_interval_s:
                self._last_temp_gc = monotonic()
                result.temp_deleted = self.staging.collect_temp_debris()
        if self.rewrapper is not None:  # its own failure is logged there; these passes are done
            result.rewrap = self.rewrapper.run_if_due()
        if result.changed:
            log.info("reconciled: %d requeued, %d failed, %d canceled, %d orphans and %d temp files deleted",
                     len(result.requeued), len(result.failed), len(result.canceled),
                     len(result.staging_deleted), result.temp_deleted)
        return result

    # The staging collector's passes, for callers that hold the reconciler (chaos bench, tests).
    def collect_orphans(self) -> list[str]:
        return self._staging().collect_orphans()

    def sweep_orphans(self) -> list[str]:
        return self._staging().sweep_orphans()

    def collect_temp_debris(self) -> int:
        return self._staging().collect_temp_debris()

    def _staging(self) -> StagingCollector:
        if self.staging is None:
            raise DocfenceError("this reconciler has no blob stores (regions) to collect from")
        return self.staging

    def run_forever(self, stop: threading.Event) -> None:
        """Pass after pass, `interval_s` apart, until `stop`, under the one loop supervisor
        (docfence.core.loops): a pass that raises anything is one log line (WARNING with the code of a
        DocfenceError, ERROR with the traceback otherwise) and a count of
        docfence_loop_errors_total{loop="reconciler"}, and the next pass follows."""
        loops.run_forever("reconciler", self.run_once, interval_s=self.config.interval_s, stop=stop,
                          record_error=metrics.record_loop_error, logger=log)
