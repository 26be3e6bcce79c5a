"""Webhook outbox and delivery contract, run unchanged against SQLite and PostgreSQL (`store` fixture):
every terminal transition writes its event in its own transaction, and deliveries are fenced leases."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, run_state_machine_as_test

from docfence.core.clock import FakeClock
from docfence.core.errors import NotFound
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, NewJob
from docfence.core.states import JobState
from docfence.store.outbox import EVENT_TYPES
from docfence.store.webhooks import AttemptResult
from docfence.testing.stores import postgres_store, reset, sqlite_store

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


def job_events(store, job_id: str) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    activity = store.webhook_activity(job_id)
    return [json.loads(payload) for _, payload in activity.events.values()]


def test_every_terminal_transition_writes_exactly_one_event(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    endpoint(store)
    ok, bad, cancel, lost, late = (submit(store, lease_ttl_s=30, max_attempts=1, deadline_s=600)
                                   for _ in range(5))
    claims = {c.job.id: c for c in store.claim("w1", limit=4)}  # `late` stays queued
    assert all(job_events(store, j) == [] for j in (ok, bad, cancel, lost, late))  # claims are not terminal
    store.complete(ok, 1, "w1", art(ok, 1))
    store.fail(bad, 1, "w1", "pdf_malformed", "broken", retryable=False)
    store.cancel(cancel, actor="key:k1")
    clock.advance(31)
    assert [j.id for j in store.requeue_expired()] == [lost]  # lease expired, attempts exhausted
    clock.advance(600)
    assert [j.id for j in store.cancel_past_deadline()] == [late]
    seen = {j: job_events(store, j) for j in (ok, bad, cancel, lost, late)}
    assert {j: [e["type"] for e in evs] for j, evs in seen.items()} == {
        ok: ["job.succeeded"], bad: ["job.failed"], cancel: ["job.canceled"], lost: ["job.failed"],
        late: ["job.canceled"]}
    done = seen[ok][0]["data"]
    assert done["sha256"] == "ab" * 32 and done["pages"] == 3 and done["state"] == "succeeded"
    assert done["links"] == {"job": f"/v1/jobs/{ok}", "events": f"/v1/jobs/{ok}/events",
                             "artifact": f"/v1/jobs/{ok}/artifact"}
    assert seen[bad][0]["data"]["error_code"] == "pdf_malformed"
    assert seen[lost][0]["data"]["error_code"] == "lease_expired"
    assert seen[late][0]["data"]["error_code"] == "deadline_exceeded"
    for job_id in (ok, bad, cancel, lost, late):  # one pending delivery each to the one endpoint
        assert [d.state for d in store.webhook_activity(job_id).deliveries] == ["pending"]
    assert claims[ok].attempt == 1


def test_no_terminal_job_lacks_its_event_even_without_endpoints(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    ids = [submit(store, max_attempts=2, retry_backoff_s=0) for _ in range(6)]
    for i, claim in enumerate(store.claim("w1", limit=6)):
        if i % 3 == 0:
            store.complete(claim.job.id, 1, "w1", art(claim.job.id, 1))
        elif i % 3 == 1:
            store.fail(claim.job.id, 1, "w1", "render_crashed", "x", retryable=True)  # queued again
        else:
            store.release(claim.job.id, 1, "w1")
    for job_id in ids:
        job = store.get(job_id)
        types = [e["type"] for e in job_events(store, job_id)]
        assert types == ([f"job.{job.state.value}"] if job.state.terminal else []), (job.state, types)
        assert store.webhook_activity(job_id).deliveries == []  # no endpoint: nothing to deliver


def test_a_rolled_back_transition_leaves_no_event(store, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    endpoint(store)
    job_id = submit(store)
    store.claim("w1")
    original = type(store)._append_events

    def append_then_fail(self, tx, events):  # type: ignore[no-untyped-def]
        original(self, tx, events)  # the audit row and the outbox rows are written...
        raise RuntimeError("a later statement of the transition failed")  # ...then it rolls back

    monkeypatch.setattr(type(store), "_append_events", append_then_fail)
    with pytest.raises(RuntimeError):
        store.complete(job_id, 1, "w1", art(job_id, 1))
    monkeypatch.undo()
    assert store.get(job_id).state is JobState.RENDERING
    assert job_events(store, job_id) == [] and store.webhook_activity(job_id).deliveries == []
    store.complete(job_id, 1, "w1", art(job_id, 1))
    assert [e["type"] for e in job_events(store, job_id)] == ["job.succeeded"]


def test_report_jobs_also_announce_their_request(store) -> None:  # type: ignore[no-untyped-def]
    endpoint(store, events=("report_request.failed",))
    job, _ = store.submit(NewJob(tenant="t1", policy=JobPolicy(), report_request_id="rr_1"))
    store.claim("w1")
    store.fail(job.id, 1, "w1", "template_error", "x", retryable=False)
    events = job_events(store, job.id)
    assert sorted(e["type"] for e in events) == ["job.failed", "report_request.failed"]
    request_event = next(e for e in events if e["type"] == "report_request.failed")
    assert request_event["data"]["links"]["report_request"] == "/v1/report-requests/rr_1"
    deliveries = store.webhook_activity(job.id).deliveries
    assert [d.type for d in deliveries] == ["report_request.failed"]  # subscribed to that one only


def test_endpoints_are_per_tenant_and_by_event_type(store) -> None:  # type: ignore[no-untyped-def]
    endpoint(store, "t1", events=("job.failed",), n=1)
    endpoint(store, "t1", events=("job.succeeded", "job.failed"), n=2)
    endpoint(store, "t2", n=1)
    job_id = submit(store, tenant="t1")
    store.claim("w1")
    store.complete(job_id, 1, "w1", art(job_id, 1))
    assert [d.endpoint_id for d in store.webhook_activity(job_id).deliveries] == ["whe_t1_2"]
    assert [e.id for e in store.list_webhook_endpoints("t2")] == ["whe_t2_1"]


def test_deliveries_are_fenced_leases(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
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
    assert not store.finish_webhook_delivery(first[0], AttemptResult("delivered", 204), to_state="delivered")
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


def test_overdue_and_disabled_deliveries_fail_with_their_reason(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    endpoint(store, n=1)
    endpoint(store, n=2)
    job_id = submit(store)
    store.claim("w1")
    store.complete(job_id, 1, "w1", art(job_id, 1))
    claims = store.claim_webhook_deliveries("d1", limit=10, lease_s=60)
    claim = next(c for c in claims if c.endpoint_id == "whe_t1_1")
    refused = AttemptResult("retry", error="connection refused")
    store.finish_webhook_delivery(claim, refused, to_state="pending", delay_s=10, reason="connection refused")
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


def test_a_delivery_racing_a_disable_is_never_claimed_and_fails_as_disabled(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
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
    assert (disabled.state, disabled.failure_reason, disabled.attempt) == ("failed", "endpoint_disabled", 0)
    assert all(a.endpoint_id == "whe_t1_1" for a in store.webhook_activity(job_id).attempts)
    clock.advance(3600)
    assert [c.endpoint_id for c in store.claim_webhook_deliveries("d1", limit=10, lease_s=60)] == ["whe_t1_1"]


def test_rotation_signs_with_both_secrets_during_the_grace(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
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


def _outbox_machine(base: type) -> type:
    """The store's interleavings machine (test_stateful.py) with one more invariant after every step:
    a job has exactly its terminal event (one delivery to the subscribed endpoint) or none."""

    class OutboxMachine(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__()
            endpoint(self.store, tenant="t")

        @invariant()
        def terminal_jobs_have_exactly_their_event(self) -> None:
            for job in self.store.list_jobs(limit=1000):
                activity = self.store.webhook_activity(job.id)
                types = sorted(t for t, _ in activity.events.values())
                assert types == ([f"job.{job.state.value}"] if job.state.terminal else []), (job.state, types)
                assert len(activity.deliveries) == len(types)

    return OutboxMachine


OUTBOX_SETTINGS = settings(max_examples=20, stateful_step_count=25, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def test_outbox_under_random_interleavings_sqlite(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from test_stateful import StoreMachine

    counter = iter(range(10**6))

    class Machine(_outbox_machine(StoreMachine)):  # type: ignore[misc]
        @staticmethod
        def store_factory(clock: FakeClock):  # type: ignore[no-untyped-def]
            return sqlite_store(tmp_path / f"o{next(counter)}.db", clock)

    run_state_machine_as_test(Machine, settings=OUTBOX_SETTINGS)


@pytest.mark.postgres
def test_outbox_under_random_interleavings_postgres(pg_url: str) -> None:
    from test_stateful import StoreMachine

    class Machine(_outbox_machine(StoreMachine)):  # type: ignore[misc]
        @staticmethod
        def store_factory(clock: FakeClock):  # type: ignore[no-untyped-def]
            store = postgres_store(pg_url, clock)
            reset(store)
            return store

    run_state_machine_as_test(Machine, settings=OUTBOX_SETTINGS)


def test_a_disabled_endpoints_delivery_does_not_use_up_the_claim(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
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


def test_pruning_deletes_only_old_events_whose_deliveries_all_finished(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
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
