"""The WebhookStore conformance suite: endpoints per tenant and event type, deliveries as fenced
leases (attempt += 1 on claim, a late outcome moves nothing), overdue and disabled deliveries failing
with their reason, secret rotation, and pruning finished events. Subclass it with `store` and `clock`
fixtures (each dialect)."""

from __future__ import annotations

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import NotFound
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, AttemptResult, NewJob
from docfence.store.outbox import EVENT_TYPES

ALL = tuple(EVENT_TYPES)


def submit(store, tenant: str = "t1", **policy) -> str:  # type: ignore[no-untyped-def]
    job, _ = store.submit(NewJob(tenant=tenant, policy=JobPolicy(**policy)))
    return str(job.id)


def art(job_id: str, attempt: int) -> ArtifactInfo:
    return ArtifactInfo(f"jobs/t1/{job_id}/artifact/{attempt}.pdf", "ab" * 32, 1234, 3, {"ok": True})


def endpoint(store, tenant: str = "t1", events: tuple[str, ...] = ALL, n: int = 1) -> str:  # type: ignore[no-untyped-def]
    ep = store.insert_webhook_endpoint(f"whe_{tenant}_{n}", tenant=tenant, url="http://127.0.0.1:9/hook",
                                       events=events, secret="whsec_c2VjcmV0c2VjcmV0c2VjcmV0",
                                       description=None, actor="op")
    return str(ep.id)



class WebhookStoreContract:
    """Subclass this in a test module that provides `store` and `clock` fixtures (one store per dialect)."""

    def test_endpoints_are_per_tenant_and_by_event_type(self, store) -> None:  # type: ignore[no-untyped-def]
        endpoint(store, "t1", events=("job.failed",), n=1)
        endpoint(store, "t1", events=("job.succeeded", "job.failed"), n=2)
        endpoint(store, "t2", n=1)
        job_id = submit(store, tenant="t1")
        store.claim("w1")
        store.complete(job_id, 1, "w1", art(job_id, 1))
        assert [d.endpoint_id for d in store.webhook_activity(job_id).deliveries] == ["whe_t1_2"]
        assert [e.id for e in store.list_webhook_endpoints("t2")] == ["whe_t2_1"]

    def test_deliveries_are_fenced_leases(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        endpoint(store)
        job_id = submit(store)
        store.claim("w1")
        store.complete(job_id, 1, "w1", art(job_id, 1))
        first = store.claim_webhook_deliveries("d1", limit=10, lease_s=60)
        assert [c.attempt for c in first] == [1] and first[0].event_type == "job.succeeded"
        assert store.claim_webhook_deliveries("d2", limit=10, lease_s=60) == []  # leased: not due
        clock.advance(61)  # d1 vanished mid-attempt: its lease expires and d2 takes attempt 2
        second = store.claim_webhook_deliveries("d2", limit=10, lease_s=60)
        assert [c.attempt for c in second] == [2]
        assert not store.finish_webhook_delivery(first[0], AttemptResult("delivered", 204),
                                                 to_state="delivered")
        assert store.finish_webhook_delivery(second[0], AttemptResult("retry", 500, error="HTTP 500"),
                                             to_state="pending", delay_s=30, reason="HTTP 500")
        assert store.claim_webhook_deliveries("d2", limit=10, lease_s=60) == []  # backing off
        clock.advance(30)
        third = store.claim_webhook_deliveries("d2", limit=10, lease_s=60)
        delivered = AttemptResult("delivered", 200, latency_ms=3.5, body_prefix="ok")
        assert store.finish_webhook_delivery(third[0], delivered, to_state="delivered")
        activity = store.webhook_activity(job_id)
        assert [(d.state, d.attempt, d.last_status) for d in activity.deliveries] == [("delivered", 3, 200)]
        # attempt 1 reported late (its outcome is evidence) but moved nothing; 2 retried; 3 delivered
        assert [(a.attempt, a.outcome, a.status_code) for a in activity.attempts] == [
            (1, "delivered", 204), (2, "retry", 500), (3, "delivered", 200)]

    def test_overdue_and_disabled_deliveries_fail_with_their_reason(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        endpoint(store, n=1)
        endpoint(store, n=2)
        job_id = submit(store)
        store.claim("w1")
        store.complete(job_id, 1, "w1", art(job_id, 1))
        claims = store.claim_webhook_deliveries("d1", limit=10, lease_s=60)
        claim = next(c for c in claims if c.endpoint_id == "whe_t1_1")
        refused = AttemptResult("retry", error="connection refused")
        store.finish_webhook_delivery(claim, refused, to_state="pending", delay_s=10,
                                      reason="connection refused")
        with pytest.raises(NotFound):
            store.disable_webhook_endpoint("whe_t1_2", tenant="t2", actor="op")  # not that tenant's
        store.disable_webhook_endpoint("whe_t1_2", tenant="t1", actor="op")
        clock.advance(86400)
        assert store.fail_overdue_webhook_deliveries(deadline_s=86400) == [(claim.event_id, "whe_t1_1")]
        by_endpoint = {d.endpoint_id: d for d in store.webhook_activity(job_id).deliveries}
        disabled = by_endpoint["whe_t1_2"]
        assert disabled.state == "failed" and disabled.failure_reason == "endpoint_disabled"
        reason = by_endpoint["whe_t1_1"].failure_reason
        assert by_endpoint["whe_t1_1"].state == "failed" and reason.startswith("deadline_exceeded")
        assert "connection refused" in reason
        assert store.claim_webhook_deliveries("d1", limit=10, lease_s=60) == []

    def test_a_delivery_racing_a_disable_is_never_claimed_and_fails_as_disabled(  # type: ignore[no-untyped-def]
        self, store, clock: FakeClock
    ) -> None:
        endpoint(store, n=1)
        endpoint(store, n=2)
        job_id = submit(store)
        store.claim("w1")
        store.complete(job_id, 1, "w1", art(job_id, 1))  # its deliveries are pending ...
        with store._tx() as tx:  # ... when a disable commits that did not see them (the race)
            assert tx.one("disable_webhook_endpoint", id="whe_t1_2", tenant="t1", now=store._now_param())
        claims = store.claim_webhook_deliveries("d1", limit=10, lease_s=60)
        assert [c.endpoint_id for c in claims] == ["whe_t1_1"]
        by_endpoint = {d.endpoint_id: d for d in store.webhook_activity(job_id).deliveries}
        disabled = by_endpoint["whe_t1_2"]
        assert (disabled.state, disabled.failure_reason, disabled.attempt) == (
            "failed", "endpoint_disabled", 0)
        assert all(a.endpoint_id == "whe_t1_1" for a in store.webhook_activity(job_id).attempts)
        clock.advance(3600)
        again = store.claim_webhook_deliveries("d1", limit=10, lease_s=60)
        assert [c.endpoint_id for c in again] == ["whe_t1_1"]

    def test_rotation_signs_with_both_secrets_during_the_grace(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        endpoint(store)
        new = "whsec_bmV3bmV3bmV3"
        store.rotate_webhook_secret("whe_t1_1", tenant="t1", secret=new, grace_s=3600, actor="op")
        job_id = submit(store)
        store.claim("w1")
        store.complete(job_id, 1, "w1", art(job_id, 1))
        (claim,) = store.claim_webhook_deliveries("d1", limit=1, lease_s=60)
        assert claim.secrets == ("whsec_bmV3bmV3bmV3", "whsec_c2VjcmV0c2VjcmV0c2VjcmV0")
        store.finish_webhook_delivery(claim, AttemptResult("retry"), to_state="pending", delay_s=0)
        clock.advance(3601)
        (later,) = store.claim_webhook_deliveries("d1", limit=1, lease_s=60)
        assert later.secrets == ("whsec_bmV3bmV3bmV3",)
        assert "secret" not in repr(store.get_webhook_endpoint("whe_t1_1")).replace("secret_grace", "")

    def test_a_disabled_endpoints_delivery_does_not_use_up_the_claim(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        endpoint(store, tenant="t1")
        endpoint(store, tenant="t2")
        first = submit(store, tenant="t1")
        store.claim("w1")
        store.complete(first, 1, "w1", art(first, 1))  # due first ...
        clock.advance(1)
        second = submit(store, tenant="t2")
        store.claim("w1")
        store.complete(second, 1, "w1", art(second, 1))
        with store._tx() as tx:  # ... and its endpoint disabled by a disable that raced the delivery's insert
            assert tx.one("disable_webhook_endpoint", id="whe_t1_1", tenant="t1", now=store._now_param())
        claims = store.claim_webhook_deliveries("d1", limit=1, lease_s=60)
        assert [(c.job_id, c.endpoint_id) for c in claims] == [(second, "whe_t2_1")]
        failed = store.webhook_activity(first).deliveries
        assert [(d.state, d.failure_reason) for d in failed] == [("failed", "endpoint_disabled")]


    def test_pruning_deletes_only_old_events_whose_deliveries_all_finished(  # type: ignore[no-untyped-def]
        self, store, clock: FakeClock
    ) -> None:
        endpoint(store, tenant="t1")
        old_done, old_pending, young_done = (submit(store) for _ in range(3))
        for c in store.claim("w1", limit=2):
            store.complete(c.job.id, 1, "w1", art(c.job.id, 1))
        claims = store.claim_webhook_deliveries("d1", limit=10, lease_s=1000)
        done = next(c for c in claims if c.job_id == old_done)
        assert store.finish_webhook_delivery(done, AttemptResult("delivered", 204), to_state="delivered")
        clock.advance(100)
        store.claim("w1")
        store.complete(young_done, 1, "w1", art(young_done, 1))
        young = store.claim_webhook_deliveries("d1", limit=10, lease_s=1000)
        assert [c.job_id for c in young] == [young_done]
        assert store.finish_webhook_delivery(young[0], AttemptResult("failed", 410), to_state="failed")
        audit_before = [e.action for e in store.audit_events(old_done)]
        assert store.prune_webhook_events(keep_s=50, limit=10) == [done.event_id]  # not the one in flight
        assert store.webhook_activity(old_done).events == {}
        gone = store.webhook_activity(old_done)
        assert gone.deliveries == [] and gone.attempts == []
        assert [e.action for e in store.audit_events(old_done)] == audit_before  # the evidence stays
        assert [d.state for d in store.webhook_activity(old_pending).deliveries] == ["delivering"]
        assert len(store.webhook_activity(young_done).deliveries) == 1
        assert store.prune_webhook_events(keep_s=50, limit=10) == []
        clock.advance(100)
        assert store.prune_webhook_events(keep_s=50, limit=10) == [young[0].event_id]
