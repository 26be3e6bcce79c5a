"""Property-based interleavings of claims (workers' and the provider dispatcher's), heartbeats, commits
(current and stale), releases, lease expiry, deadlines and cancels across several workers, checked
after every step on both stores."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from docfence.core.clock import FakeClock
from docfence.core.errors import IllegalTransition, LeaseLost, StaleAttempt
from docfence.core.policy import JobPolicy, Kind
from docfence.core.records import ArtifactInfo, Completion, NewJob
from docfence.core.states import ALLOWED_PAIRS, TERMINAL_STATES, JobState
from docfence.store.audit import verify_events
from docfence.testing.stores import postgres_store, reset, sqlite_store

WORKERS = ("w0", "w1", "w2")
DISPATCHER, PROVIDER = "d0", "vendor"  # the dispatcher claims the jobs an outside provider renders


class StoreMachine(RuleBasedStateMachine):
    store_factory = None  # set per backend

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = type(self).store_factory(self.clock)  # type: ignore[misc]
        self.jobs: list[str] = []
        self.leases: list[tuple[str, int, str]] = []  # every (job, attempt, worker) ever handed out
        self.seen: dict[str, tuple[JobState, int]] = {}
        self.provider_jobs: set[str] = set()

    def teardown(self) -> None:
        self.store.close()

    @rule(deadline=st.sampled_from([3.0, 20.0, 200.0]), attempts=st.integers(1, 3))
    def submit(self, deadline: float, attempts: int) -> None:
        policy = JobPolicy(deadline_s=deadline, lease_ttl_s=5.0, max_attempts=attempts, retry_backoff_s=1.0)
        job, _ = self.store.submit(NewJob(tenant="t", policy=policy))
        self.jobs.append(job.id)

    @rule(deadline=st.sampled_from([3.0, 20.0, 200.0]), attempts=st.integers(1, 3))
    def submit_provider_job(self, deadline: float, attempts: int) -> None:
        policy = JobPolicy(kind=Kind.REPORT, report={"processor": PROVIDER}, deadline_s=deadline,
                           lease_ttl_s=5.0, max_attempts=attempts, retry_backoff_s=1.0)
        job, _ = self.store.submit(NewJob(tenant="t", policy=policy))
        self.jobs.append(job.id)
        self.provider_jobs.add(job.id)

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 3))
    def claim(self, worker: str, limit: int) -> None:
        for c in self.store.claim(worker, limit=limit):
            assert c.job.id not in self.provider_jobs, "a worker took a provider-rendered job"
            self._handed_out(c.job.id, c.attempt, worker)

    @rule(limit=st.integers(1, 3))
    def claim_provider(self, limit: int) -> None:
        for c in self.store.claim_provider_jobs(DISPATCHER, [PROVIDER], limit=limit):
            assert c.job.id in self.provider_jobs, "the dispatcher took a job rendered here"
            self._handed_out(c.job.id, c.attempt, DISPATCHER)

    def _handed_out(self, job_id: str, attempt: int, worker: str) -> None:
        handed_out = {(j, a) for j, a, _ in self.leases}
        assert (job_id, attempt) not in handed_out, "attempt handed out twice"
        self.leases.append((job_id, attempt, worker))

    def _expect_current(self, job_id: str, attempt: int, worker: str) -> bool:
        job = self.store.get(job_id)
        return (job.state is JobState.RENDERING and job.attempt == attempt and job.lease_owner == worker
                and job.lease_expires_at is not None and job.lease_expires_at > self.clock.now())

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        job_id, attempt, worker = data.draw(st.sampled_from(self.leases))
        current = self._expect_current(job_id, attempt, worker)
        try:
            self.store.heartbeat(job_id, attempt, worker)
            assert current, "a stale lease was extended"
        except LeaseLost:
            assert not current, "a current lease was refused"

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), outcome=st.sampled_from(["commit", "retry", "fail"]))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        job_id, attempt, worker = data.draw(st.sampled_from(self.leases))
        current = self._expect_current(job_id, attempt, worker)
        try:
            if outcome == "commit":
                info = ArtifactInfo(f"a/{job_id}/{attempt}", "f" * 64, 1, 1)
                self.store.complete(job_id, attempt, worker, info)
                assert self.store.artifact(job_id).attempt == attempt  # type: ignore[union-attr]
            else:
                self.store.fail(job_id, attempt, worker, "x", "y", retryable=outcome == "retry")
            assert current, f"stale attempt {attempt} of {job_id} was allowed to {outcome}"
        except StaleAttempt:
            assert not current, "the current attempt was refused"

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """A graceful shutdown hands a lease back: only the current attempt's, and the job is queued."""
        job_id, attempt, worker = data.draw(st.sampled_from(self.leases))
        current = self._expect_current(job_id, attempt, worker)
        try:
            job = self.store.release(job_id, attempt, worker)
            assert current, f"stale attempt {attempt} of {job_id} released a lease"
            assert job.state is JobState.QUEUED and job.attempt == attempt and job.lease_owner is None
        except StaleAttempt:
            assert not current, "the current attempt could not release its lease"

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), worker=st.sampled_from(WORKERS))
    def group_commit(self, data: st.DataObject, worker: str) -> None:
        """A batched commit mixing current and stale attempts: exactly the current ones succeed."""
        mine = sorted({(j, a) for j, a, w in self.leases if w == worker})
        if not mine:
            return
        picked = data.draw(st.lists(st.sampled_from(mine), min_size=1, max_size=4, unique=True))
        current = {(j, a) for j, a in picked if self._expect_current(j, a, worker)}
        done = self.store.complete_many(
            [Completion(j, a, ArtifactInfo(f"a/{j}/{a}", "e" * 64, 2, 1)) for j, a in picked], worker)
        assert set(done) == current, "a group commit published a stale attempt or refused a current one"
        for job_id, attempt in current:
            assert self.store.artifact(job_id).attempt == attempt  # type: ignore[union-attr]

    @rule(seconds=st.sampled_from([0.5, 2.0, 6.0, 30.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(batch=st.integers(1, 5))
    def reconcile(self, batch: int) -> None:
        for job in self.store.requeue_expired(batch=batch):
            assert job.state in (JobState.QUEUED, JobState.FAILED)
        self.store.cancel_past_deadline(batch=batch)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.jobs))
        before = self.store.get(job_id).state
        try:
            assert self.store.cancel(job_id, actor="user").state is JobState.CANCELED
            assert not before.terminal
        except IllegalTransition:
            assert before.terminal

    @invariant()
    def promise_holds(self) -> None:
        now = self.clock.now()
        for job in self.store.list_jobs(limit=1000):
            prev = self.seen.get(job.id)
            if prev is not None:
                assert job.attempt >= prev[1], "attempts went down"
                if prev[0] in TERMINAL_STATES:
                    assert job.state is prev[0], "a terminal state changed"
            self.seen[job.id] = (job.state, job.attempt)
            if job.state is JobState.RENDERING:  # one lease per job, held by the current attempt
                assert job.lease_owner and (job.id, job.attempt, job.lease_owner) in self.leases
            else:
                assert job.lease_owner is None
            if job.state is JobState.SUCCEEDED:
                assert self.store.artifact(job.id).attempt == job.attempt  # type: ignore[union-attr]
            self._check_audit(job.id, job.state)
        assert now == self.clock.now()

    def _check_audit(self, job_id: str, state: JobState) -> None:
        events = self.store.audit_events(job_id)
        pairs = [(JobState(e.from_state) if e.from_state else None, JobState(e.to_state)) for e in events]
        assert all(p in ALLOWED_PAIRS for p in pairs), f"transition outside the table: {pairs}"
        linked = all(a[1] == b[0] for a, b in itertools.pairwise(pairs))
        assert linked, "a transition has no audit event"
        assert pairs[-1][1] is state

    @invariant()
    def audit_chain_verifies(self) -> None:
        if len(self.jobs) % 4 == 0:  # full verification is costlier; sample it
            result = verify_events(self.store.iter_audit(), self.store.audit_heads())
            assert result.ok, result.problem


# Bounded for CI; DOCFENCE_SOAK=1 explores far more interleavings.
EXAMPLES = 1000 if os.environ.get("DOCFENCE_SOAK") else 80
SETTINGS = settings(max_examples=EXAMPLES, stateful_step_count=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def test_stateful_sqlite(tmp_path: Path) -> None:
    counter = iter(range(10**6))

    class SqliteMachine(StoreMachine):
        @staticmethod
        def store_factory(clock: FakeClock):  # type: ignore[no-untyped-def]
            return sqlite_store(tmp_path / f"s{next(counter)}.db", clock)

    run_state_machine_as_test(SqliteMachine, settings=SETTINGS)


@pytest.mark.postgres
def test_stateful_postgres(pg_url: str) -> None:
    class PgMachine(StoreMachine):
        @staticmethod
        def store_factory(clock: FakeClock):  # type: ignore[no-untyped-def]
            store = postgres_store(pg_url, clock)
            reset(store)
            return store

    run_state_machine_as_test(PgMachine, settings=SETTINGS)
