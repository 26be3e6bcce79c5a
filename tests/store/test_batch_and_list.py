"""Batch submission and the filtered, keyset-paginated job list, run against SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import IdempotencyConflict
from docfence.core.policy import JobPolicy, Mode
from docfence.core.records import NewJob
from docfence.core.states import JobState
from docfence.store.audit import verify_events


def new(tenant: str = "t1", **fields) -> NewJob:  # type: ignore[no-untyped-def]
    return NewJob(tenant=tenant, policy=JobPolicy(), **fields)


def test_submit_many_creates_every_job_with_its_event_in_one_transaction(store) -> None:  # type: ignore[no-untyped-def]
    news = [new(label=f"batch-{i % 2}", filename=f"scan {i}.pdf", request_hash=f"h{i}") for i in range(5)]
    answers = store.submit_many(news)
    assert [created for _, created in answers] == [True] * 5
    for (job, _), sent in zip(answers, news, strict=True):
        stored = store.get(job.id)
        assert stored.state is JobState.QUEUED and stored.label == sent.label
        assert stored.filename == sent.filename
        events = store.audit_events(job.id)
        assert [e.action for e in events] == ["submitted"]
        assert sent.filename not in str(events[0].details)  # caller text stays out of the audit trail
    assert store.count_by_state()["queued"] == 5
    assert verify_events(store.iter_audit(), store.audit_heads()).ok


def test_submit_many_replays_known_keys_and_refuses_a_conflict_whole(store) -> None:  # type: ignore[no-untyped-def]
    first, _ = store.submit(new(idempotency_key="k1", request_hash="h1"))
    answers = store.submit_many([new(idempotency_key="k1", request_hash="h1"),
                                 new(idempotency_key="k2", request_hash="h2")])
    assert answers[0] == (store.get(first.id), False) and answers[1][1] is True
    before = store.count_by_state()["queued"]
    with pytest.raises(IdempotencyConflict):
        store.submit_many([new(idempotency_key="k3", request_hash="h3"),
                           new(idempotency_key="k1", request_hash="other")])
    assert store.count_by_state()["queued"] == before  # k3 rolled back with the conflict
    assert store.list_jobs(limit=50) and all(j.idempotency_key != "k3" for j in store.list_jobs(limit=50))


def test_submit_many_partial_commits_the_valid_items(store) -> None:  # type: ignore[no-untyped-def]
    store.submit(new(idempotency_key="k1", request_hash="h1"))
    answers = store.submit_many([new(idempotency_key="k4", request_hash="h4"),
                                 new(idempotency_key="k1", request_hash="other"),
                                 new(idempotency_key="k4", request_hash="h4")], all_or_nothing=False)
    assert answers[0][1] is True  # type: ignore[index]
    assert isinstance(answers[1], IdempotencyConflict)
    assert answers[2] == (answers[0][0], False)  # type: ignore[index]  # the same key twice: one job


def test_list_jobs_filters_by_label_filename_and_creation_range(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    start = clock.now()
    early, _ = store.submit(new(label="invoices", filename="a.pdf"))
    clock.advance(10)
    late, _ = store.submit(NewJob(tenant="t1", policy=JobPolicy(mode=Mode.RASTER), label="invoices",
                                  filename="b.pdf"))
    store.submit(new(tenant="t2", label="invoices", filename="a.pdf"))
    assert [j.id for j in store.list_jobs(tenant="t1", label="invoices")] == [late.id, early.id]
    assert [j.id for j in store.list_jobs(tenant="t1", filename="a.pdf")] == [early.id]
    mid = start + timedelta(seconds=5)
    assert [j.id for j in store.list_jobs(tenant="t1", created_after=mid)] == [late.id]
    assert [j.id for j in store.list_jobs(tenant="t1", created_before=mid)] == [early.id]
    assert [j.id for j in store.list_jobs(tenant="t1", label="invoices", mode="raster")] == [late.id]
    assert store.list_jobs(tenant="t1", label="other") == []


def test_list_jobs_pages_a_batch_with_one_creation_time_without_gaps(store) -> None:  # type: ignore[no-untyped-def]
    answers = store.submit_many([new(label="same-time") for _ in range(7)])
    ids = sorted((job.id for job, _ in answers), reverse=True)
    seen, after = [], None
    while True:
        page = store.list_jobs(label="same-time", limit=3, after=after)
        seen += [j.id for j in page]
        if len(page) < 3:
            break
        after = (page[-1].created_at, page[-1].id)
    assert seen == ids  # one creation time for all: the id breaks the tie, nothing repeats or is lost
