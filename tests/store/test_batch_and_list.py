"""Batch submission and the filtered, keyset-paginated job list, run against SQLite and PostgreSQL."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import IdempotencyConflict
from docfence.core.policy import JobPolicy, Mode
from docfence.core.records import Job, NewJob
from docfence.core.states import JobState
from docfence.store.audit import verify_events
from docfence.store.base import Store
from docfence.store.sqlstore import _insert_params
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.procs import wait_for
from docfence.testing.stores import postgres_store, sqlite_store


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


# -- concurrent batches sharing idempotency keys -------------------------------------------------------


def _keyed(key: str) -> NewJob:
    return new(idempotency_key=key, request_hash=f"hash-{key}")


def _own_store(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: FakeClock) -> Store:
    """Another store on the same database, for another thread's transaction (closed by that thread)."""
    if store_kind == "sqlite":
        return sqlite_store(tmp_path / "store.db", clock)
    return postgres_store(request.getfixturevalue("pg_url"), clock)


def _submit_in_thread(opener: Callable[[], Store], news: list[NewJob],
                      start: threading.Barrier | None = None) -> tuple[threading.Thread, list[Any]]:
    """submit_many on its own connection in a thread; the list receives its answers or its error."""
    out: list[Any] = []

    def run() -> None:
        own = opener()
        try:
            if start is not None:
                start.wait(timeout=HANG_GUARD_S)
            out.append(own.submit_many(news))
        except Exception as exc:  # handed to the test thread, which asserts on it
            out.append(exc)
        finally:
            own.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _check_same_jobs(store: Store, first: list[Any], second: list[Any], shared: list[str]) -> None:
    """Each shared key is one job, created by exactly one batch, answered in each caller's order."""
    assert not isinstance(first[0], Exception) and not isinstance(second[0], Exception), (first, second)
    by_key: dict[str, list[tuple[Job, bool]]] = {}
    for answer in first[0] + second[0]:
        by_key.setdefault(answer[0].idempotency_key, []).append(answer)
    for key in shared:
        (job_a, created_a), (job_b, created_b) = by_key[key]
        assert job_a.id == job_b.id and created_a != created_b
        assert store.get(job_a.id).idempotency_key == key


def test_batches_sharing_keys_in_opposite_order_both_commit(  # type: ignore[no-untyped-def]
    store, store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: FakeClock
) -> None:
    shared = [f"k{i:02d}" for i in range(20)]
    start = threading.Barrier(2)
    opener = functools.partial(_own_store, store_kind, tmp_path, request, clock)
    one = _submit_in_thread(opener, [_keyed(k) for k in shared], start)
    two = _submit_in_thread(opener, [_keyed(k) for k in reversed(shared)], start)
    for thread, _ in (one, two):
        thread.join(HANG_GUARD_S)
    _check_same_jobs(store, one[1], two[1], shared)
    assert [job.idempotency_key for job, _ in two[1][0]] == list(reversed(shared))  # caller's order


@pytest.mark.postgres
def test_postgres_batches_that_would_deadlock_both_commit(  # type: ignore[no-untyped-def]
    store, store_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: FakeClock
) -> None:
    """Batch one takes k-a, then waits for a third transaction holding k-x; batch two then takes k-b and
    waits for k-a. Inserted in the callers' orders, batch one would next wait for k-b: a deadlock."""
    if store_kind != "postgres":
        pytest.skip("SQLite has one writer at a time: its batches cannot interleave")
    url = request.getfixturevalue("pg_url")
    blocker = psycopg.connect(url, autocommit=True)
    watcher = psycopg.connect(url, autocommit=True)
    try:
        blocker.execute("BEGIN")
        blocker.execute(store.queries["submitted"],
                        {"items": json.dumps([_insert_params(_keyed("k-x"))]), "now": None,
                         "to_state": "queued"})

        def waiting(n: int) -> Callable[[], bool]:
            query = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND wait_event_type = 'Lock'")
            return lambda: watcher.execute(query).fetchone()[0] >= n  # type: ignore[index]

        opener = functools.partial(_own_store, store_kind, tmp_path, request, clock)
        one = _submit_in_thread(opener, [_keyed("k-a"), _keyed("k-x"), _keyed("k-b")])
        wait_for(waiting(1), HANG_GUARD_S, "batch one waiting for k-x")
        two = _submit_in_thread(opener, [_keyed("k-b"), _keyed("k-a")])
        wait_for(waiting(2), HANG_GUARD_S, "batch two waiting too")
        blocker.execute("ROLLBACK")
        for thread, _ in (one, two):
            thread.join(HANG_GUARD_S)
    finally:
        blocker.close()
        watcher.close()
    _check_same_jobs(store, one[1], two[1], ["k-a", "k-b"])
    assert [created for _, created in one[1][0]] == [True, True, True]
    assert [job.idempotency_key for job, _ in two[1][0]] == ["k-b", "k-a"]
