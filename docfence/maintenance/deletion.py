"""Deletion with evidence: tombstone the job (its row, attempts and audit trail stay), then remove
every byte under its prefix in its region, then record what was removed. Retention expiry does the
same without a request. Bytes a stale attempt uploads after the deletion belong to a deleted job, so
the reconciler's orphan collection removes them (Reconciler.collect_orphans)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from docfence.blobs.regions import RegionRouter
from docfence.storage_keys import job_prefix
from docfence.store.base import AuditLog, OpsStore


class DeletionStore(OpsStore, AuditLog, Protocol):
    """What deletion uses: tombstones and retention (operations), and its evidence (the audit log)."""


log = logging.getLogger("docfence.deletion")


@dataclass(frozen=True)
class DeletionReport:
    job_id: str
    request_id: str | None
    objects_deleted: int
    reason: str


class DeletionService:
    def __init__(self, store: DeletionStore, regions: RegionRouter) -> None:
        self.store, self.regions = store, regions

    def delete_job(self, job_id: str, *, actor: str, request_id: str | None,
                   reason: str = "deletion_requested", note: str | None = None) -> DeletionReport:
        """Remove every byte of a job (input, all attempts, artifact); keep its metadata as a tombstone.
        Idempotent; a running attempt is canceled first and can no longer publish. `note`, the
        caller's free-text reason, is recorded in the tombstone's (and the cancel's) audit details."""
        job = self.store.tombstone(job_id, actor=actor, request_id=request_id, reason=reason, note=note)
        removed = self.regions.for_region(job.region).delete_prefix(job_prefix(job.tenant, job.id))
        self.store.record_event("bytes_deleted", actor=actor, job_id=job.id, reason=reason,
                                details={"request_id": request_id, "objects": removed, "region": job.region})
        log.info("deleted %d objects", removed, extra={"job_id": job.id, "attempt": job.attempt})
        return DeletionReport(job.id, request_id, removed, reason)

    def enforce_retention(self, *, batch: int = 100) -> list[DeletionReport]:
        """Delete the bytes of terminal jobs whose retention expired, in one bounded batch."""
        return [self.delete_job(job_id, actor="retention", request_id=None, reason="retention_expired")
                for job_id in self.store.retention_due(batch=batch)]
