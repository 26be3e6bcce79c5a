"""Every row of core's TRANSITIONS, walked on both stores: each legal (event, source) succeeds and lands
in the row's target (attempt bumped when the row says so, with the row's audit event); every other pair
is refused and leaves the job row and its audit trail unchanged. One transition = its row in
core/states.py, its query in queries/<dialect>/transitions.sql, and this test."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import IdempotencyConflict, IllegalTransition, StaleAttempt
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, Job, NewJob
from docfence.core.states import TRANSITIONS, Event, JobState, transition
from docfence.store.queries import load_queries

LEASE_S, DEADLINE_S = 30.0, 600.0
#: Rows taken only when the job has no attempt left: their jobs are given one attempt.
EXHAUSTING = {Event.RETRIES_EXHAUSTED, Event.LEASE_EXPIRED_EXHAUSTED}


#: Events that share one statement, differing only in the target the store passes from their row.
FAMILIES = {Event.PERMANENT_ERROR: "error_reported", Event.RETRYABLE_ERROR: "error_reported",
            Event.RETRIES_EXHAUSTED: "error_reported", Event.LEASE_EXPIRED_EXHAUSTED: "lease_expired"}


class NothingMoved(Exception):
    """A batch transition (claim, reconciler pass) that left the job where it was: its refusal."""


REFUSALS = (StaleAttempt, IllegalTransition, IdempotencyConflict, NothingMoved)


def _moved(job: Job, jobs: list[Any]) -> None:
    if job.id not in {j.id for j in jobs}:
        raise NothingMoved(job.id)


def _fail(retryable: bool) -> Callable[[Any, FakeClock, Job], None]:
    def run(store: Any, clock: FakeClock, job: Job) -> None:
        store.fail(job.id, job.attempt, "w", "render_error", "it broke", retryable=retryable)
    return run


def _expire(store: Any, clock: FakeClock, job: Job) -> None:
    clock.advance(LEASE_S + 1)
    _moved(job, store.requeue_expired())


def _past_deadline(store: Any, clock: FakeClock, job: Job) -> None:
    clock.advance(DEADLINE_S + 1)
    _moved(job, store.cancel_past_deadline())


def _claim(store: Any, clock: FakeClock, job: Job) -> None:
    _moved(job, [c.job for c in store.claim("w2", limit=10)])


def _commit(store: Any, clock: FakeClock, job: Job) -> None:
    store.complete(job.id, job.attempt, "w", ArtifactInfo(f"a/{job.id}/{job.attempt}", "a" * 64, 10, 1))


def _resubmit(store: Any, clock: FakeClock, job: Job) -> None:
    store.submit(NewJob(tenant="t", policy=job.policy, job_id=job.id))  # the same id again


#: How each event is asked of the store, as its callers ask it (the worker, reconciler, caller).
DRIVERS: dict[Event, Callable[[Any, FakeClock, Job], None]] = {
    Event.SUBMITTED: _resubmit,
    Event.LEASE_ACQUIRED: _claim,
    Event.ARTIFACT_COMMITTED: _commit,
    Event.PERMANENT_ERROR: _fail(retryable=False),
    Event.RETRYABLE_ERROR: _fail(retryable=True),
    Event.RETRIES_EXHAUSTED: _fail(retryable=True),
    Event.LEASE_EXPIRED: _expire,
    Event.LEASE_EXPIRED_EXHAUSTED: _expire,
    Event.LEASE_RELEASED: lambda store, clock, job: store.release(job.id, job.attempt, "w"),
    Event.DEADLINE_REACHED: _past_deadline,
    Event.CANCEL_REQUESTED: lambda store, clock, job: store.cancel(job.id, actor="user"),
}

PAIRS = [(event, source) for event in Event for source in (None, *JobState)
         if source is not None or event is Event.SUBMITTED]
LEGAL = {(t.event, t.source) for t in TRANSITIONS}


def _job_in(store: Any, state: JobState, event: Event) -> Job:
    """A job brought to `state` through legal transitions, by worker "w" where it was claimed."""
    policy = JobPolicy(lease_ttl_s=LEASE_S, deadline_s=DEADLINE_S,
                       max_attempts=1 if event in EXHAUSTING else 3)
    job, _ = store.submit(NewJob(tenant="t", policy=policy))
    if state is JobState.CANCELED:
        store.cancel(job.id, actor="user")
    elif state is not JobState.QUEUED:
        (claim,) = store.claim("w")
        if state is JobState.SUCCEEDED:
            _commit(store, FakeClock(), claim.job)
        elif state is JobState.FAILED:
            store.fail(job.id, claim.attempt, "w", "bad_input", "no", retryable=False)
    found: Job = store.get(job.id)
    assert found.state is state
    return found


def test_every_row_is_walked_and_has_its_query_in_both_dialects() -> None:
    assert set(DRIVERS) == set(Event), "an event without a driver is never walked"
    for dialect in ("sqlite", "postgres"):
        queries = load_queries(dialect)
        missing = {t.query for t in TRANSITIONS} - set(queries)
        assert not missing, f"{dialect} lacks the queries {missing}"
    for t in TRANSITIONS:  # query names follow events: the event's own name, or its family's
        assert t.query == FAMILIES.get(t.event, t.event.value), t


def test_a_submission_creates_a_queued_job(store) -> None:  # type: ignore[no-untyped-def]
    t = transition(Event.SUBMITTED, None)
    job, created = store.submit(NewJob(tenant="t", policy=JobPolicy()))
    assert created and job.state is t.target and job.attempt == 0
    (event,) = store.audit_events(job.id)
    assert (event.action, event.from_state, event.to_state) == (t.event.value, None, t.target.value)


@pytest.mark.parametrize(("event", "source"), [p for p in PAIRS if p[1] is not None],
                         ids=[f"{e.value}-from-{s.value}" for e, s in PAIRS if s is not None])
def test_a_pair_is_legal_exactly_when_the_table_lists_it(  # type: ignore[no-untyped-def]
    store, clock: FakeClock, event: Event, source: JobState
) -> None:
    job = _job_in(store, source, event)
    trail = store.audit_events(job.id)
    if (event, source) not in LEGAL:
        with pytest.raises(REFUSALS):
            DRIVERS[event](store, clock, job)
        assert store.get(job.id) == job, "a refused transition changed the job"
        assert store.audit_events(job.id) == trail, "a refused transition wrote an audit event"
        return
    t = transition(event, source)
    DRIVERS[event](store, clock, job)
    after = store.get(job.id)
    assert after.state is t.target
    assert after.attempt == job.attempt + (1 if t.bumps_attempt else 0)
    new = store.audit_events(job.id)[len(trail):]
    assert [(e.action, e.from_state, e.to_state) for e in new] == \
        [(t.event.value, t.source.value if t.source else None, t.target.value)]
    assert new[0].attempt == after.attempt
