"""Lease rescue on both stores, driven by the fake clock: an expired lease is requeued (or failed when
its attempts are exhausted), a valid one is never touched, and one pass stays within its batch."""

from __future__ import annotations

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import DocfenceError
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.maintenance.batch import BatchConfig
from docfence.maintenance.lease_rescue import LeaseRescuer
from docfence.store.base import Store

POLICY = JobPolicy(lease_ttl_s=30, deadline_s=3600, max_attempts=2)


def _claimed(store: Store, n: int = 1) -> list[str]:
    ids = [store.submit(NewJob(tenant="t1", policy=POLICY))[0].id for _ in range(n)]
    assert {c.job.id for c in store.claim("w1", limit=n)} == set(ids)
    return ids


def test_an_expired_lease_is_requeued_and_a_valid_one_kept(store: Store, clock: FakeClock) -> None:
    (expired,) = _claimed(store)
    clock.advance(20)
    (valid,) = _claimed(store)
    rescue = LeaseRescuer(store, BatchConfig())
    assert rescue.run_once().requeued == []  # both leases still valid
    clock.advance(11)  # the first lease ran out, the second has 19 s left
    result = rescue.run_once()
    assert (result.requeued, result.failed) == ([expired], [])
    assert store.get(expired).state.value == "queued" and store.get(valid).state.value == "rendering"


def test_out_of_attempts_the_job_fails_and_one_pass_stays_bounded(store: Store, clock: FakeClock) -> None:
    ids = _claimed(store, 3)
    clock.advance(31)
    rescue = LeaseRescuer(store, BatchConfig(batch=2))
    assert len(rescue.run_once().requeued) == 2 and len(rescue.run_once().requeued) == 1
    assert {c.job.id for c in store.claim("w2", limit=3)} == set(ids)  # attempt 2 of 2
    clock.advance(31)
    failed = rescue.run_once().failed + rescue.run_once().failed
    assert sorted(failed) == sorted(ids)
    assert {store.get(j).last_error_code for j in ids} == {"lease_expired"}


def test_a_batch_below_one_is_refused_at_construction() -> None:
    with pytest.raises(DocfenceError, match="batch"):
        BatchConfig(batch=0)
