"""The wake-up contract, run unchanged against SQLite and PostgreSQL (see the `store` fixture).

No test waits for time to pass: waiters are given an hour of safety poll, so only an announcement
can wake them, and HANG_GUARD_S only stops a broken build from hanging. Cross-process cases run a
real waiting process (docfence.testing.wakeup_probe) that prints each wake-up it gets.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from docfence.core.clock import FakeClock
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, Completion, NewJob
from docfence.core.states import JobState
from docfence.testing.wakeup_probe import HANG_GUARD_S, Probe


class _Rollback(Exception):
    pass


def submit(store, **policy) -> str:  # type: ignore[no-untyped-def]
    job, _ = store.submit(NewJob(tenant="t1", policy=JobPolicy(**policy)))
    return str(job.id)


def art(job_id: str, attempt: int) -> ArtifactInfo:
    return ArtifactInfo(f"jobs/t1/{job_id}/attempts/{attempt}/output.pdf", "0" * 64, 10, 1, {"ok": True})


def db_url(store) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite:///{Path(store.path).resolve()}" if store.dialect == "sqlite" else str(store.url)


def probe(store, job_ids: list[str] | None = None) -> Probe:  # type: ignore[no-untyped-def]
    return Probe(db_url(store), job_ids or [])


def listening(store) -> None:  # type: ignore[no-untyped-def]
    """Make this thread's next `wait_for_work` wait for an announcement: the first call of a thread
    returns as soon as the listener listens."""
    assert store.wait_for_work(HANG_GUARD_S)


# -- cross-process --------------------------------------------------------------------------------
def test_a_submission_wakes_an_idle_waiter_in_another_process(store) -> None:  # type: ignore[no-untyped-def]
    with probe(store) as p:
        submit(store)
        assert p.line() == f"work {p.ready_gen + 1}"
        submit(store)
        assert p.line() == f"work {p.ready_gen + 2}"


def test_a_commit_that_ends_a_job_wakes_its_watcher_in_another_process(store) -> None:  # type: ignore[no-untyped-def]
    job_id, other = submit(store), submit(store)
    with probe(store, [job_id]) as p:
        claims = {c.job.id: c for c in store.claim("w", limit=2)}
        store.complete(other, claims[other].attempt, "w", art(other, 1))  # not watched: no wake
        store.complete(job_id, claims[job_id].attempt, "w", art(job_id, 1))
        assert p.line() == f"end {job_id} {p.ready_gen}"


def test_a_rolled_back_transaction_wakes_nobody(store) -> None:  # type: ignore[no-untyped-def]
    rolled_back, committed = submit(store), submit(store)
    with probe(store, [rolled_back, committed]) as p:
        with pytest.raises(_Rollback), store._tx() as tx:
            tx.announce_work()
            tx.announce_job_end([rolled_back])
            raise _Rollback
        store.cancel(committed, actor="op")
        # Announcements reach a process in commit order, so had the rolled-back ones been sent they
        # would show here: as an id, or as a work generation past the one at "ready".
        assert p.line() == f"end {committed} {p.ready_gen}"
        submit(store)
        assert p.line() == f"work {p.ready_gen + 1}"


# -- every transition that queues or ends a job announces it ---------------------------------------
def test_transitions_that_queue_jobs_wake_idle_workers(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    listening(store)
    submit(store, lease_ttl_s=10, retry_backoff_s=0, max_attempts=5)
    assert store.wait_for_work(HANG_GUARD_S)  # submitted
    claim = store.claim("w")[0]
    store.release(claim.job.id, claim.attempt, "w")
    assert store.wait_for_work(HANG_GUARD_S)  # released
    claim = store.claim("w")[0]
    store.fail(claim.job.id, claim.attempt, "w", "render_crashed", "crashed", retryable=True)
    assert store.wait_for_work(HANG_GUARD_S)  # retried at once (no back-off)
    store.claim("w")
    clock.advance(11)
    assert [j.state for j in store.requeue_expired()] == [JobState.QUEUED]
    assert store.wait_for_work(HANG_GUARD_S)  # rescued by the reconciler
    store.pause_claims("all", actor="op")
    store.resume_claims("all", actor="op")
    assert store.wait_for_work(HANG_GUARD_S)  # claims resumed


def test_every_terminal_transition_wakes_the_watchers_of_its_job(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    listening(store)
    ids = [submit(store, lease_ttl_s=10, max_attempts=1, deadline_s=100) for _ in range(6)]
    late = submit(store, deadline_s=5)
    with store.watch_job_end([*ids, late]) as watch:
        claims = {c.job.id: c for c in store.claim("w", limit=6)}
        store.complete_many([Completion(i, claims[i].attempt, art(i, 1)) for i in ids[:2]], "w")
        assert watch.wait(HANG_GUARD_S) and watch.take_announced() == set(ids[:2])  # group commit
        store.fail(ids[2], claims[ids[2]].attempt, "w", "bad_pdf", "malformed", retryable=False)
        assert watch.wait(HANG_GUARD_S) and watch.take_announced() == {ids[2]}  # permanent failure
        store.cancel(ids[3], actor="op")
        assert watch.wait(HANG_GUARD_S) and watch.take_announced() == {ids[3]}  # cancel requested
        clock.advance(11)
        assert [j.state for j in store.requeue_expired()] == [JobState.FAILED] * 2
        assert watch.wait(HANG_GUARD_S) and watch.take_announced() == set(ids[4:])  # out of attempts
        assert [j.id for j in store.cancel_past_deadline()] == [late]
        assert watch.wait(HANG_GUARD_S) and watch.take_announced() == {late}  # deadline reached


# -- losing the listener ---------------------------------------------------------------------------
def break_listener(store) -> None:  # type: ignore[no-untyped-def]
    """PostgreSQL: the server ends the listening session. SQLite: the socket file disappears."""
    listener = store.wakeup_listener()
    if store.dialect == "postgres":
        pid = listener.backend_pid()
        assert pid is not None
        with store._tx() as tx:
            tx.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    else:
        path = listener.socket_path()
        assert path is not None
        path.unlink()


def test_waiters_recover_when_the_listener_is_lost(store) -> None:  # type: ignore[no-untyped-def]
    listening(store)
    job_id = submit(store)
    assert store.wait_for_work(HANG_GUARD_S)
    woken: list[bool] = []
    with store.watch_job_end([job_id]) as watch:
        blocked = threading.Thread(target=lambda: woken.append(watch.wait(HANG_GUARD_S)))
        blocked.start()
        break_listener(store)
        # Announcements sent while nobody listened are lost, so listening again wakes every waiter
        # to re-read (PostgreSQL reconnects by itself; SQLite rebinds when a waiter checks).
        assert store.wait_for_work(HANG_GUARD_S)
        blocked.join(HANG_GUARD_S)
        assert woken == [True] and watch.take_announced() == set()
        submit(store)  # and announcements flow again
        assert store.wait_for_work(HANG_GUARD_S)
        store.cancel(job_id, actor="op")
        assert watch.wait(HANG_GUARD_S) and watch.take_announced() == {job_id}


def test_a_watch_hears_only_its_own_jobs(store) -> None:  # type: ignore[no-untyped-def]
    listening(store)
    mine, other = submit(store), submit(store)
    with store.watch_job_end([mine]) as watch, store.watch_job_end([other]) as other_watch:
        store.cancel(other, actor="op")
        store.cancel(mine, actor="op")
        assert watch.wait(HANG_GUARD_S) and watch.take_announced() == {mine}
        assert other_watch.wait(HANG_GUARD_S) and other_watch.take_announced() == {other}
    assert store.wakeup_listener().fanout.watched_jobs() == set()
