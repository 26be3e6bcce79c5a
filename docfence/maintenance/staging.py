"""Staging collection: delete objects nobody may keep (attempts that can no longer publish, every
byte of a deleted job, uploads whose job row never committed) once past `staging_grace_s`, and the temp
files that writers killed mid-put leave in local folders. Bounded per pass; a sweep covers everything."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from docfence.blobs.base import BlobStore
from docfence.blobs.local import LocalBlobStore
from docfence.blobs.regions import RegionRouter
from docfence.core.errors import DocfenceError, NotFound
from docfence.storage_keys import attempt_of_staging_key
from docfence.store.base import JobStore

TEMP_MIN_AGE_S = 60.0  # never remove a temp file written to within this, whatever staging_grace_s says
# Never remove an object of an unknown job id written within this, whatever staging_grace_s says: a batch
# stores all its uploads before its one commit, and the blob store's clock is not the database's.
UNCOMMITTED_MIN_AGE_S = 600.0


@dataclass(frozen=True)
class StagingConfig:
    gc_batch: int = 500  # objects examined per region per pass
    # An attempt's staged object is collected only once the attempt ended at least this long ago
    # (store clock): its worker may still be uploading or discarding it, and an object store's
    # listing may lag. Objects of deleted jobs are collected at once. Settings.staging_grace_s.
    # Temp files are removed once last written more than max(staging_grace_s, TEMP_MIN_AGE_S) ago;
    # objects under a job id the store does not know (a submission that died before its job row
    # committed) once last written more than max(staging_grace_s, UNCOMMITTED_MIN_AGE_S) ago.
    staging_grace_s: float = 60.0

    def __post_init__(self) -> None:
        if self.gc_batch < 1:
            raise DocfenceError("reconciler gc_batch must be positive")
        if self.staging_grace_s < 0:
            raise DocfenceError("reconciler staging_grace_s must not be negative")


class StagingCollector:
    """`collect_orphans()` is one bounded pass (the next one continues where it stopped),
    `sweep_orphans()` all of it, `collect_temp_debris()` the temp files."""

    def __init__(self, store: JobStore, regions: RegionRouter, config: StagingConfig) -> None:
        self.store, self.regions, self.config = store, regions, config
        self._cursor: dict[str, str] = {}  # per region: the last key examined, so passes take turns

    def run_once(self) -> list[str]:
        return self.collect_orphans()

    def sweep_orphans(self) -> list[str]:
        """Collect orphans over every object of every region, in gc_batch steps, until each listing
        is exhausted (collect_orphans does one bounded step). Objects still within staging_grace_s
        are left; after the grace, a sweep while no worker runs leaves no orphan behind."""
        deleted: list[str] = []
        now = self.store.now()
        for region in self.regions.approved():
            self._cursor.pop(region, None)
            deleted += self._collect_region(region, now, {})
            while region in self._cursor:  # stopped at its batch limit: go on from there
                deleted += self._collect_region(region, now, {})
        return deleted

    def collect_temp_debris(self) -> int:
        """Remove the temp files interrupted writes left in local folders (never listed as objects, so
        collect_orphans cannot see them) once last written more than max(staging_grace_s,
        TEMP_MIN_AGE_S) ago. Object stores without such files are skipped. Returns how many went."""
        older_than = max(self.config.staging_grace_s, TEMP_MIN_AGE_S)
        removed, seen = 0, set()
        for region in self.regions.approved():
            blobs = self.regions.for_region(region)
            if id(blobs) in seen or not isinstance(blobs, LocalBlobStore):
                continue
            seen.add(id(blobs))
            removed += blobs.remove_stale_temp(older_than_s=older_than)
        return removed

    def collect_orphans(self) -> list[str]:
        """Delete objects nobody may keep: any object of a deleted job, attempts older than the job's
        current attempt, and any attempt of a terminal job other than the committed one (each once
        its attempt ended staging_grace_s ago), and the input and sealed password of a job id the
        store does not know, once written long enough ago (see StagingConfig). Examines at most
        gc_batch objects per region, continuing where the previous pass stopped."""
        verdicts: dict[tuple[str, int | None], bool | None] = {}
        now = self.store.now()
        deleted: list[str] = []
        for region in self.regions.approved():
            deleted += self._collect_region(region, now, verdicts)
        return deleted

    def _collect_region(self, region: str, now: datetime,
                        verdicts: dict[tuple[str, int | None], bool | None]) -> list[str]:
        """One bounded step over one region's listing, from its cursor."""
        blobs = self.regions.for_region(region)
        deleted: list[str] = []
        cursor, examined, last = self._cursor.get(region, ""), 0, ""
        for key in blobs.list("jobs"):
            if key <= cursor:
                continue
            examined, last = examined + 1, key
            probe = (key.split("/")[2], attempt_of_staging_key(key))
            if probe not in verdicts:
                orphan = self._is_orphan(*probe)
                verdicts[probe] = orphan and not self._in_grace(*probe, now)
            verdict = verdicts[probe]
            if verdict is None:  # no job row: each object by its own age
                verdict = self._is_abandoned_upload(blobs, key, probe[0], now)
            if verdict:
                blobs.delete(key)
                deleted.append(key)
            if examined >= self.config.gc_batch:
                break
        if examined >= self.config.gc_batch:
            self._cursor[region] = last
        else:
            self._cursor.pop(region, None)  # listing exhausted: the next step starts over
        return deleted

    def _is_orphan(self, job_id: str, attempt: int | None) -> bool | None:
        """Deleted jobs own no bytes at all; otherwise only attempt objects can be orphans. None: the
        job id is unknown and the object is not an attempt's, so its age decides (_is_abandoned_upload)."""
        try:
            job = self.store.get(job_id)
        except NotFound:
            return True if attempt is not None else None
        if job.deleted_at is not None:
            return True
        if attempt is None:
            return False
        if not job.state.terminal:
            return attempt < job.attempt
        artifact = self.store.artifact(job_id)
        return artifact is None or artifact.attempt != attempt

    def _is_abandoned_upload(self, blobs: BlobStore, key: str, job_id: str, now: datetime) -> bool:
        """Whether `key` (an input or sealed password under a job id with no row) was written long
        enough ago that its submission cannot still commit: a submission commits right after storing
        its bytes, and job rows are never removed. The store is asked again just before the verdict,
        so a row committed since the listing keeps its bytes."""
        written = blobs.modified_at(key)
        if written is None:  # gone already
            return False
        if now - written < timedelta(seconds=max(self.config.staging_grace_s, UNCOMMITTED_MIN_AGE_S)):
            return False
        try:
            self.store.get(job_id)
        except NotFound:
            return True
        return False

    def _in_grace(self, job_id: str, attempt: int | None, now: datetime) -> bool:
        """Whether the object of `attempt` must be kept a while longer (see staging_grace_s)."""
        if attempt is None or self.config.staging_grace_s == 0:
            return False
        try:
            if self.store.get(job_id).deleted_at is not None:
                return False
        except NotFound:
            return False
        rows = [a for a in self.store.attempts(job_id) if a.attempt == attempt]
        ended = rows[0].ended_at if rows else None
        if ended is None:  # no record of its end (yet): it may be in use
            return bool(rows)
        return now - ended < timedelta(seconds=self.config.staging_grace_s)
