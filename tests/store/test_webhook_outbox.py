"""The webhook outbox, run against SQLite and PostgreSQL (`store` fixture): every terminal transition
writes its event in its own transaction (the WebhookStore suite, docfence/testing/webhook_store_contract.py,
runs from test_store_contracts.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, run_state_machine_as_test

from docfence.core.clock import FakeClock
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.core.states import JobState
from docfence.testing.stores import postgres_store, reset, sqlite_store
from docfence.testing.webhook_store_contract import art, endpoint, submit


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
    original = type(store)._append_job_events

    def append_then_fail(self, tx, events):  # type: ignore[no-untyped-def]
        original(self, tx, events)  # the audit row and the outbox rows are written...
        raise RuntimeError("a later statement of the transition failed")  # ...then it rolls back

    monkeypatch.setattr(type(store), "_append_job_events", append_then_fail)
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
