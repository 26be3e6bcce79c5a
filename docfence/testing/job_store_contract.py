"""The JobStore conformance suite: one class of pytest tests every backend passes unchanged (submit,
claim, heartbeat, fenced commit, failure, cancel, release, reads), plus the helpers the other store
suites share. A test module subclasses it and provides `store` (each dialect) and `clock` fixtures."""

from __future__ import annotations

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import IdempotencyConflict, IllegalTransition, LeaseLost, NotFound, StaleAttempt
from docfence.core.policy import JobPolicy, Mode
from docfence.core.records import ArtifactInfo, Completion, NewJob
from docfence.core.states import JobState
from docfence.store.audit import verify_events


def submit(store, **policy) -> str:  # type: ignore[no-untyped-def]
    job, created = store.submit(NewJob(tenant="t1", policy=JobPolicy(**policy)))
    assert created
    return str(job.id)


def art(job_id: str, attempt: int) -> ArtifactInfo:
    return ArtifactInfo(f"jobs/t1/{job_id}/artifact/{attempt}.pdf", "0" * 64, 10, 1, {"ok": True})



class JobStoreContract:
    """Subclass this in a test module that provides `store` and `clock` fixtures (one store per dialect)."""

    def test_submit_is_idempotent_and_conflicts_on_a_different_request(self, store) -> None:  # type: ignore[no-untyped-def]
        new = NewJob(tenant="t1", policy=JobPolicy(), idempotency_key="k1", request_hash="h1")
        first, created = store.submit(new)
        again, created_again = store.submit(new)
        assert created and not created_again and again.id == first.id
        with pytest.raises(IdempotencyConflict):
            store.submit(NewJob(tenant="t1", policy=JobPolicy(), idempotency_key="k1", request_hash="h2"))
        other_tenant, created_other = store.submit(
            NewJob(tenant="t2", policy=JobPolicy(), idempotency_key="k1", request_hash="h2"))
        assert created_other and other_tenant.id != first.id
        assert store.count_by_state()["queued"] == 2

    def test_policy_is_frozen_at_submission(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        job_id = submit(store, mode=Mode.RASTER, dpi=200, deadline_s=60, max_attempts=4, region="eu-1")
        store.set_class_mode("default", "vector", actor="op")
        job = store.get(job_id)
        assert job.policy.mode is Mode.RASTER and job.policy.dpi == 200 and job.mode == "raster"
        assert job.max_attempts == 4 and job.region == "eu-1"
        assert (job.deadline_at - job.created_at).total_seconds() == 60
        assert store.class_modes() == {"default": "vector"}

    def test_claim_sets_attempt_and_lease_from_the_store_clock(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        ids = [submit(store, lease_ttl_s=30) for _ in range(3)]
        claims = store.claim("w1", limit=2)
        assert [c.job.id for c in claims] == ids[:2]
        for c in claims:
            assert c.attempt == 1 and c.job.state is JobState.RENDERING and c.job.lease_owner == "w1"
            assert c.lease_expires_at == clock.now() + (c.lease_expires_at - clock.now())
            assert (c.lease_expires_at - clock.now()).total_seconds() == 30
        assert len(store.claim("w2", limit=5)) == 1
        assert store.claim("w3", limit=5) == []

    def test_heartbeat_extends_only_the_current_lease(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        job_id = submit(store, lease_ttl_s=10)
        claim = store.claim("w1")[0]
        clock.advance(8)
        assert (store.heartbeat(job_id, 1, "w1") - clock.now()).total_seconds() == 10
        with pytest.raises(LeaseLost):
            store.heartbeat(job_id, 2, "w1")
        with pytest.raises(LeaseLost):
            store.heartbeat(job_id, 1, "w2")
        clock.advance(11)
        with pytest.raises(LeaseLost):  # expired: a heartbeat cannot revive it
            store.heartbeat(job_id, claim.attempt, "w1")

    def test_only_the_current_attempt_commits(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        job_id = submit(store, lease_ttl_s=10, max_attempts=3)
        store.claim("old")
        clock.advance(11)
        assert [j.state for j in store.requeue_expired()] == [JobState.QUEUED]
        store.claim("new")
        with pytest.raises(StaleAttempt):
            store.complete(job_id, 1, "old", art(job_id, 1))
        with pytest.raises(StaleAttempt):
            store.fail(job_id, 1, "old", "boom", "x", retryable=False)
        done = store.complete(job_id, 2, "new", art(job_id, 2))
        assert done.state is JobState.SUCCEEDED and done.lease_owner is None
        assert store.artifact(job_id).attempt == 2
        with pytest.raises(StaleAttempt):
            store.complete(job_id, 2, "new", art(job_id, 2))
        with pytest.raises(IllegalTransition):
            store.cancel(job_id, actor="user")
        assert store.get(job_id).state is JobState.SUCCEEDED

    def test_group_commit_fences_each_attempt_on_its_own(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        ids = [submit(store, lease_ttl_s=10, max_attempts=3) for _ in range(5)]
        store.claim("w1", limit=5)
        store.cancel(ids[1], actor="user")  # canceled under the worker
        clock.advance(11)
        completions = [Completion(i, 1, art(i, 1)) for i in ids]
        assert store.complete_many(completions, "w1") == {}  # expired (or canceled): all stale at once
        assert len(store.requeue_expired(batch=10)) == 4
        assert [c.job.id for c in store.claim("w2", limit=4)] == [ids[0], *ids[2:]]  # attempt 2, w2
        ids2 = [submit(store, lease_ttl_s=10) for _ in range(3)]
        claims = store.claim("w3", limit=3)
        assert [c.job.id for c in claims] == ids2
        batch = [Completion(ids2[0], 1, art(ids2[0], 1)), Completion(ids2[1], 1, art(ids2[1], 1)),
                 Completion(ids2[2], 2, art(ids2[2], 2)), Completion(ids[0], 2, art(ids[0], 2))]
        done = store.complete_many(batch, "w3")  # ids2[2] is attempt 1, ids[0] belongs to w2
        assert sorted(done) == sorted([(ids2[0], 1), (ids2[1], 1)])
        assert all(j.state is JobState.SUCCEEDED for j in done.values())
        assert store.artifact(ids2[0]).key == art(ids2[0], 1).key
        assert store.artifact(ids2[2]) is None and store.get(ids2[2]).state is JobState.RENDERING
        assert [e.action for e in store.audit_events(ids2[2])] == ["submitted", "lease_acquired"]
        assert store.get(ids[0]).lease_owner == "w2"
        assert [a.outcome for a in store.attempts(ids2[1])] == ["artifact_committed"]
        assert store.complete_many(batch[:2], "w3") == {}  # already terminal: a replay changes nothing
        with pytest.raises(ValueError):
            store.complete_many([batch[0], batch[0]], "w3")
        assert verify_events(store.iter_audit(), store.audit_heads()).ok

    def test_commit_after_lease_expiry_is_refused_even_before_the_reconciler(  # type: ignore[no-untyped-def]
        self, store, clock: FakeClock
    ) -> None:
        job_id = submit(store, lease_ttl_s=10)
        store.claim("w1")
        clock.advance(10.5)
        with pytest.raises(StaleAttempt):
            store.complete(job_id, 1, "w1", art(job_id, 1))
        assert store.artifact(job_id) is None

    def test_retryable_failure_backs_off_then_exhausts(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        job_id = submit(store, max_attempts=2, retry_backoff_s=4)
        store.claim("w")
        job = store.fail(job_id, 1, "w", "render_timeout", "took too long", retryable=True)
        assert job.state is JobState.QUEUED and job.last_error_code == "render_timeout"
        assert store.claim("w") == []  # backing off
        clock.advance(4)
        assert store.claim("w")[0].attempt == 2
        job = store.fail(job_id, 2, "w", "render_timeout", "took too long", retryable=True)
        assert job.state is JobState.FAILED
        assert [a.outcome for a in store.attempts(job_id)] == ["retryable_error", "retries_exhausted"]

    def test_permanent_failure(self, store) -> None:  # type: ignore[no-untyped-def]
        job_id = submit(store)
        store.claim("w")
        job = store.fail(job_id, 1, "w", "not_a_pdf", "The input is not a PDF file.", retryable=False)
        assert job.state is JobState.FAILED and job.finished_at is not None
        assert job.last_error_message == "The input is not a PDF file."

    def test_cancel_on_request(self, store) -> None:  # type: ignore[no-untyped-def]
        queued = submit(store)
        rendering = submit(store)
        store.claim("w", limit=1)
        assert store.cancel(queued, actor="u").state is JobState.CANCELED
        assert store.cancel(rendering, actor="u").state is JobState.CANCELED
        with pytest.raises(StaleAttempt):
            store.heartbeat(queued, 1, "w")
        with pytest.raises(NotFound):
            store.cancel("job_missing", actor="u")

    def test_release_hands_the_lease_back(self, store) -> None:  # type: ignore[no-untyped-def]
        job_id = submit(store)
        store.claim("w")
        assert store.release(job_id, 1, "w").state is JobState.QUEUED
        assert store.claim("w2")[0].attempt == 2

    def test_list_jobs_pages_with_a_keyset_cursor(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        same_instant = [submit(store) for _ in range(3)]  # ties on created_at are broken by id
        clock.advance(1)
        later = [submit(store) for _ in range(2)]
        everything = [j.id for j in store.list_jobs()]
        assert set(everything) == set(same_instant + later) and set(everything[:2]) == set(later)
        pages, after = [], None
        while True:
            page = store.list_jobs(limit=2, after=after)
            if not page:
                break
            pages.append([j.id for j in page])
            after = (page[-1].created_at, page[-1].id)
        assert [i for p in pages for i in p] == everything and [len(p) for p in pages] == [2, 2, 1]
