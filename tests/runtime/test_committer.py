"""The worker's group committer on both stores: results staged together commit in one transaction,
each fenced on its own row; a stale one is reported stale; an unreachable store is retried only while
the lease may still hold."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from docfence.blobs.local import LocalBlobStore
from docfence.core.errors import StoreError, StoreUnavailable
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, Job, NewJob
from docfence.core.states import JobState
from docfence.worker.committer import Committer, StagedResult
from docfence.worker.leases import Lease


class CountingStore:
    """The real store, with its group commits counted; the first `fail_first` raise `error`, and
    groups larger than `refuse_groups_over` raise StoreError."""

    def __init__(self, store: Any, fail_first: int = 0, error: Exception | None = None,
                 refuse_groups_over: int | None = None) -> None:
        self.store, self.calls, self.fail_first = store, [], fail_first
        self.error = error or StoreUnavailable("injected: the store is unreachable")
        self.refuse_groups_over = refuse_groups_over

    def close_thread_connection(self) -> None:  # the committer thread closes its own as it ends
        self.store.close_thread_connection()

    def complete_many(self, completions: Any, worker: str) -> Any:
        self.calls.append(len(completions))
        if len(self.calls) <= self.fail_first:
            raise self.error
        if self.refuse_groups_over is not None and len(completions) > self.refuse_groups_over:
            raise StoreError("injected: the group was refused")
        return self.store.complete_many(completions, worker)


def _staged(store: Any, blobs: LocalBlobStore, n: int) -> list[StagedResult]:
    for _ in range(n):
        store.submit(NewJob(tenant="t1", policy=JobPolicy(lease_ttl_s=30)))
    results = []
    for claim in store.claim("w", limit=n):
        key = f"staging/t1/{claim.job.id}/{claim.attempt}.pdf"
        info = blobs.put_stream(key, io.BytesIO(b"%PDF-1.7 staged"), max_bytes=1000)
        artifact = ArtifactInfo(key, info.sha256, info.bytes, 1)
        results.append(StagedResult(claim, artifact, Lease(claim.job.id, claim.attempt, 30.0), blobs))
    return results


def _committer(store: Any) -> tuple[Committer, list[tuple[str, Job | None]], list[tuple[str, bool]]]:
    committed: list[tuple[str, Job | None]] = []
    stale: list[tuple[str, bool]] = []  # (job id, whether the store said so)
    committer = Committer(store, "w", max_batch=100,
                          on_committed=lambda r, job: committed.append((r.claim.job.id, job)),
                          on_stale=lambda r, known: stale.append((r.claim.job.id, known)))
    return committer, committed, stale


def test_results_waiting_together_commit_in_one_transaction(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    blobs = LocalBlobStore(tmp_path / "objects")
    results = _staged(store, blobs, 5)
    store.cancel(results[2].claim.job.id, actor="user")  # canceled while its result was staged
    spy = CountingStore(store)
    committer, committed, stale = _committer(spy)
    for result in results:  # all waiting before the committer runs: one group
        committer.submit(result)
    committer.start()
    committer.close()
    assert spy.calls == [5]
    assert stale == [(results[2].claim.job.id, True)]
    assert sorted(j for j, _ in committed) == sorted(r.claim.job.id for i, r in enumerate(results) if i != 2)
    for job_id, job in committed:
        assert job is not None and job.state is JobState.SUCCEEDED
        assert store.artifact(job_id).key.startswith("staging/")  # type: ignore[union-attr]
    assert store.get(results[2].claim.job.id).state is JobState.CANCELED


def test_an_unreachable_store_is_retried_while_the_lease_holds(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results = _staged(store, LocalBlobStore(tmp_path / "objects"), 2)
    spy = CountingStore(store, fail_first=1)
    committer, committed, stale = _committer(spy)
    committer.commit(results)
    assert spy.calls == [2, 2] and stale == [] and len(committed) == 2


def test_a_lease_unconfirmed_for_its_ttl_is_not_retried(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fresh, old = _staged(store, LocalBlobStore(tmp_path / "objects"), 2)
    old.lease.confirmed_at -= 31.0  # the heartbeats failed for longer than the lease
    spy = CountingStore(store, fail_first=1)
    committer, committed, stale = _committer(spy)
    committer.commit([fresh, old])
    assert spy.calls == [2, 1]  # the second try carries only the lease that may still hold
    assert stale == [(old.claim.job.id, False)]  # unknown: its staged object must be kept
    assert [j for j, _ in committed] == [fresh.claim.job.id]
    assert store.get(old.claim.job.id).state is JobState.RENDERING  # the reconciler rescues it later


def test_a_refused_group_is_split_so_one_bad_result_cannot_fail_the_others(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results = _staged(store, LocalBlobStore(tmp_path / "objects"), 3)
    spy = CountingStore(store, refuse_groups_over=1)
    committer, committed, stale = _committer(spy)
    committer.commit(results)
    assert spy.calls == [3, 1, 1, 1] and stale == [] and len(committed) == 3


def test_an_unexpected_failure_still_settles_every_result(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results = _staged(store, LocalBlobStore(tmp_path / "objects"), 3)
    spy = CountingStore(store, fail_first=1, error=RuntimeError("injected: a bug"))
    committer, committed, stale = _committer(spy)
    committer.commit(results)
    assert committed == [] and sorted(stale) == sorted((r.claim.job.id, False) for r in results)
