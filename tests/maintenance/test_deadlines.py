"""Deadline cancellation on both stores, driven by the fake clock: queued and rendering jobs past
their deadline are canceled (the rendering attempt ended), jobs within it are left alone."""

from __future__ import annotations

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import DocfenceError
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.maintenance.batch import BatchConfig
from docfence.maintenance.deadlines import DeadlineCanceller
from docfence.store.base import Store


def _job(store: Store, deadline_s: float) -> str:
    return store.submit(NewJob(tenant="t1", policy=JobPolicy(deadline_s=deadline_s, lease_ttl_s=600)))[0].id


def test_jobs_past_their_deadline_are_canceled(store: Store, clock: FakeClock) -> None:
    rendering = _job(store, 60)
    assert [c.job.id for c in store.claim("w1")] == [rendering]
    queued, later = _job(store, 60), _job(store, 600)
    cancel = DeadlineCanceller(store, BatchConfig())
    assert cancel.run_once() == []
    clock.advance(61)
    assert sorted(cancel.run_once()) == sorted([rendering, queued])
    assert {store.get(j).last_error_code for j in (rendering, queued)} == {"deadline_exceeded"}
    assert store.get(later).state.value == "queued"
    (attempt,) = store.attempts(rendering)
    assert attempt.ended_at is not None  # the rendering attempt can no longer publish


def test_one_pass_stays_within_its_batch(store: Store, clock: FakeClock) -> None:
    ids = [_job(store, 10) for _ in range(3)]
    clock.advance(11)
    cancel = DeadlineCanceller(store, BatchConfig(batch=2))
    first, second = cancel.run_once(), cancel.run_once()
    assert len(first) == 2 and sorted(first + second) == sorted(ids)
    with pytest.raises(DocfenceError, match="batch"):
        BatchConfig(batch=0)
