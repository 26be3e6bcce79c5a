"""Group commit for one worker: one thread owns the fenced commits of staged results.

Results staged while a commit is in flight wait and are committed together in one transaction
(`Store.complete_many`), each still fenced on its own row. When renders are slower than commits, as
they usually are, every result is committed alone as soon as it is staged. A lease stays held until
its result's outcome is known; a stale result's staged object is deleted and nothing is published.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from docfence.blobs.base import BlobStore
from docfence.core.clock import monotonic
from docfence.core.errors import StoreError, StoreUnavailable
from docfence.core.loops import report_failure
from docfence.core.records import ArtifactInfo, Claim, Completion, Job
from docfence.faults import fault_point
from docfence.observability import metrics
from docfence.store.base import JobStore
from docfence.worker.leases import Lease, store_thread

log = logging.getLogger("docfence.worker")


@dataclass(frozen=True)
class StagedResult:
    """A validated render uploaded to its attempt-specific staging key, waiting for its commit."""

    claim: Claim
    artifact: ArtifactInfo
    lease: Lease
    blobs: BlobStore


class Committer:
    """`submit` hands a result over; exactly one callback settles each, from the committer thread:
    `on_committed(result, job)`, or `on_stale(result, known)` where `known` is False when the store
    could not be reached to tell (the staged object must then be kept for the reconciler).
    `close` commits what is waiting, then stops the thread."""

    def __init__(self, store: JobStore, worker: str, *, max_batch: int,
                 on_committed: Callable[[StagedResult, Job | None], None],
                 on_stale: Callable[[StagedResult, bool], None]) -> None:
        self.store, self.worker, self.max_batch = store, worker, max_batch
        self.on_committed, self.on_stale = on_committed, on_stale
        self._waiting: list[StagedResult] = []
        self._cond = threading.Condition()
        self._closing = False
        self._thread = store_thread(store, self._commit_until_closed, "committer")

    def start(self) -> None:
        self._thread.start()

    def submit(self, result: StagedResult) -> None:
        with self._cond:
            self._waiting.append(result)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()

    def _commit_until_closed(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closing:
                    self._cond.wait()
                if not self._waiting:
                    return  # closing and nothing left
                batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch:]
            self.commit(batch)

    def commit(self, batch: list[StagedResult]) -> None:
        """Commit `batch`, settling every result exactly once whatever fails (never lose a lease)."""
        settled: set[int] = set()
        try:
            fault_point("before_commit")
            self._commit_group(batch, settled)
        except Exception as exc:  # an unexpected failure: nothing of the rest is known to be committed
            report_failure("group commit", exc, log)
            metrics.record_loop_error("committer")
            for result in batch:
                if id(result) not in settled:
                    self._settle(settled, result, self.on_stale, False)

    def _commit_group(self, batch: list[StagedResult], settled: set[int]) -> None:
        """One transaction, retried while the store is unreachable and each lease may still hold.
        A retry after a lost answer finds the job no longer rendering: the stale path then checks
        whether our own commit went through. A non-retryable error splits the group, so one bad
        result cannot fail the others."""
        pending, tries = list(batch), 0
        while pending:
            try:
                done = self.store.complete_many(
                    [Completion(r.claim.job.id, r.claim.attempt, r.artifact) for r in pending], self.worker)
            except StoreUnavailable as exc:
                metrics.record_infra_retry("store", exc.code)
                if tries == 0:  # one line per outage
                    log.warning("commit: store outage (%s); retrying while the leases hold", exc.code,
                                extra={"worker": self.worker})
                tries += 1
                for result in [r for r in pending if _maybe_expired(r.lease)]:
                    self._settle(settled, result, self.on_stale, False)
                pending = [r for r in pending if id(r) not in settled]
                if pending:
                    threading.Event().wait(0.2)
                continue
            except StoreError as exc:
                log.warning("commit failed: %s", exc.code, extra={"worker": self.worker})
                if len(pending) > 1:
                    for result in pending:
                        self._commit_group([result], settled)
                else:
                    self._settle(settled, pending[0], self.on_stale, False)
                return
            for result in pending:
                job = done.get((result.claim.job.id, result.claim.attempt))
                if job is not None:
                    self._settle(settled, result, self.on_committed, job)
                else:
                    self._settle(settled, result, self.on_stale, True)
            return

    def _settle(self, settled: set[int], result: StagedResult, callback: Callable[[StagedResult, Any], None],
                arg: Any) -> None:
        settled.add(id(result))
        try:
            callback(result, arg)
        except Exception as exc:  # the callback owns the lease and gives it back in its own finally
            report_failure(f"recording the commit outcome of job {result.claim.job.id} attempt "
                           f"{result.claim.attempt}", exc, log)
            metrics.record_loop_error("committer")


def _maybe_expired(lease: Lease) -> bool:
    return lease.lost.is_set() or monotonic() - lease.confirmed_at > lease.ttl_s
