"""The OpsStore conformance suite: claim pauses, class modes, lease and state counts, the reconciler's
passes (expired leases, deadlines), retention and tombstones. Subclass it with `store` and `clock`."""

from __future__ import annotations

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import StaleAttempt
from docfence.core.policy import Mode
from docfence.core.states import JobState
from docfence.testing.job_store_contract import art, submit


class OpsStoreContract:
    """Subclass this in a test module that provides `store` and `clock` fixtures (one store per dialect)."""

    def test_claim_skips_paused_modes_and_past_deadline(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        raster = submit(store, mode=Mode.RASTER)
        short = submit(store, deadline_s=5)
        store.pause_claims("raster", actor="op")
        clock.advance(6)
        assert store.claim("w", limit=10) == []  # raster paused, the other past its deadline
        store.resume_claims("raster", actor="op")
        assert [c.job.id for c in store.claim("w", limit=10)] == [raster]
        assert [j.id for j in store.cancel_past_deadline()] == [short]
        store.pause_claims("all", actor="op")
        submit(store)
        assert store.claim("w", limit=10) == []
        assert store.paused_scopes() == ["all"]

    def test_requeue_expired_is_bounded_and_never_touches_valid_leases(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        for _ in range(5):
            submit(store, lease_ttl_s=10, max_attempts=1)
        store.claim("w1", limit=5)
        fresh = submit(store, lease_ttl_s=100)
        clock.advance(11)
        store.claim("w2", limit=1)  # the fresh one: lease valid for 100 s
        assert len(store.requeue_expired(batch=2)) == 2
        moved = store.requeue_expired(batch=10)
        assert len(moved) == 3 and all(j.state is JobState.FAILED for j in moved)  # out of attempts
        assert store.get(fresh).state is JobState.RENDERING
        assert store.requeue_expired() == []
        assert store.valid_lease_count() == 1

    def test_deadline_cancels_queued_and_rendering_in_batches(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        a = submit(store, deadline_s=5)
        b = submit(store, deadline_s=5, lease_ttl_s=100)
        store.claim("w", limit=1)
        submit(store, deadline_s=500)
        clock.advance(5)
        assert len(store.cancel_past_deadline(batch=1)) == 1
        assert len(store.cancel_past_deadline(batch=10)) == 1
        assert {store.get(a).state, store.get(b).state} == {JobState.CANCELED}
        assert store.get(a).last_error_code == "deadline_exceeded"
        with pytest.raises(StaleAttempt):  # the rendering worker lost to the deadline
            store.complete(a, 1, "w", art(a, 1))

    def test_pauses_and_class_modes_are_recorded_with_who_and_why(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        store.pause_claims("raster", actor="op", reason="maintenance")
        store.pause_claims("raster", actor="op2")  # already paused: nothing changes
        (pause,) = store.claim_pauses()
        assert (pause.scope, pause.actor, pause.reason, pause.paused_at) == ("raster", "op", "maintenance",
                                                                           clock.now())
        store.resume_claims("raster", actor="op")
        store.resume_claims("raster", actor="op")  # not paused: nothing to record
        assert store.paused_scopes() == [] and store.claim_pauses() == []
        store.set_class_mode("phi", "raster", actor="op")
        store.set_class_mode("phi", "vector", actor="op")
        assert store.class_modes() == {"phi": "vector"}
        actions = [e.action for e in store.audit_trail() if e.chain == "operations"]
        assert actions == ["claims_paused", "claims_resumed", "class_mode_changed", "class_mode_changed"]

    def test_counts_by_state_and_valid_leases_by_mode(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        submit(store, mode=Mode.RASTER, lease_ttl_s=10)
        submit(store, lease_ttl_s=10)
        submit(store)
        store.claim("w", limit=2)
        counts = store.count_by_state()
        assert set(counts) == {s.value for s in JobState}
        assert (counts["queued"], counts["rendering"], counts["succeeded"]) == (1, 2, 0)
        assert store.valid_lease_count() == 2 and store.valid_lease_count(mode="raster") == 1
        clock.advance(11)
        assert store.valid_lease_count() == 0  # expired leases are not valid, before any requeue

    def test_tombstones_mark_bytes_deleted_and_retention_lists_expired_finished_jobs(  # type: ignore[no-untyped-def]
        self, store, clock: FakeClock
    ) -> None:
        done = submit(store, retention_s=60)
        active = submit(store, retention_s=60)
        store.claim("w", limit=1)
        store.complete(done, 1, "w", art(done, 1))
        assert store.retention_due() == []
        clock.advance(61)
        assert store.retention_due() == [done]  # the queued one is not finished: never due
        job = store.tombstone(done, actor="op", request_id="del-1", reason="retention_expired", note="asked")
        assert job.state is JobState.SUCCEEDED and job.deleted_at is not None
        assert store.get(done).deleted_at == job.deleted_at and store.retention_due() == []
        last = store.audit_events(done)[-1]
        assert (last.action, last.reason, last.details) == ("bytes_deletion", "retention_expired",
                                                            {"request_id": "del-1", "note": "asked"})
        clock.advance(1)
        assert store.tombstone(done, actor="op", request_id="del-2", reason="x").deleted_at == job.deleted_at
        canceled = store.tombstone(active, actor="op", request_id="del-3", reason="deletion_requested")
        assert canceled.state is JobState.CANCELED and canceled.deleted_at is not None
        events = store.audit_events(active)
        assert [(e.to_state, e.reason) for e in events[-2:]] == [
            ("canceled", "deletion_requested"), ("canceled", "deletion_requested")]
        assert events[-1].action == "bytes_deletion"
