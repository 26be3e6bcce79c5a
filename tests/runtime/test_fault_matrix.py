"""The fault matrix with real worker processes killed by real signals, on both stores.

Each case ends with exactly one durable artifact whose sha256 matches, or an explicit terminal
error, and no stale attempt ever wins. No outcome depends on how fast this machine runs: leases
(LEASE_TTL_S) and the render budget are long, so a starved worker cannot run out of either by
accident; when a case needs a lease to expire, a reconciler whose store clock is moved past the
lease requeues it; and the order of events is set with fault-point barriers (`wait:NAME`), not with
sleeps. Deadlines in `wait_for` are only hang guards.
"""

from __future__ import annotations

import hashlib
import io
import random
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from docfence.blobs import open_blob_store
from docfence.blobs.kek.jobs import JobKeys, read_object
from docfence.config import load_settings
from docfence.core.clock import FakeClock
from docfence.core.errors import StoreUnavailable
from docfence.core.records import Job
from docfence.core.states import JobState
from docfence.maintenance.reconciler import Reconciler
from docfence.samples.pdfs import links
from docfence.service import Principal, Service, SubmitRequest
from docfence.service.artifacts_keys import row_key
from docfence.store.base import open_store
from docfence.testing.barriers import HANG_GUARD_S, Barriers
from docfence.testing.procs import long_budget_config, start_worker, stop, wait_for, worker_env
from docfence.testing.stores import temporary_pg_database
from docfence.wiring import Runtime

PRINCIPAL = Principal("test", "t1", ("admin",))
LEASE_TTL_S = 120.0  # longer than any case runs: only the test decides when a lease expires
EXPIRY_S = LEASE_TTL_S + 1  # how far past the database's now the test's expiring reconciler looks


@dataclass
class Env:
    db_url: str
    storage_url: str
    root: Path
    tmp: Path

    def env(self, **extra: str) -> dict[str, str]:
        return worker_env(self.db_url, self.storage_url, DOCFENCE_FAULTS_DIR=str(self.tmp),
                          DOCFENCE_LEASE_TTL_S=str(LEASE_TTL_S), **long_budget_config(self.tmp), **extra)

    def runtime(self) -> Runtime:
        return Runtime.open(load_settings(env=self.env()))

    @property
    def barriers(self) -> Barriers:
        return Barriers(self.tmp)

    def reconciler_after(self, rt: Runtime, seconds: float) -> Reconciler:
        """The real reconciler, on a store whose clock reads `seconds` past the database's now."""
        clock = FakeClock(rt.store.now() + timedelta(seconds=seconds))
        store = open_store(self.db_url, clock=clock, migrate=False)
        return Reconciler(store, rt.regions, rt.reconciler().config)

    def expire_leases(self, rt: Runtime) -> list[str]:
        """Requeue every lease as the reconciler does once it has expired (the workers holding them
        keep running), without waiting for it to happen."""
        reconciler = self.reconciler_after(rt, EXPIRY_S)
        try:
            return [j.id for j in reconciler.store.requeue_expired(batch=100)]
        finally:
            reconciler.store.close()


@pytest.fixture(params=["sqlite", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    root = tmp_path / "objects"
    root.mkdir()
    storage = f"file://{root}"
    if request.param == "sqlite":
        yield Env(f"sqlite:///{tmp_path / 'jobs.db'}", storage, root, tmp_path)
    else:
        with temporary_pg_database("docfence_fault") as url:
            yield Env(url, storage, root, tmp_path)


def submit(rt: Runtime, key: str | None = None) -> str:
    service = Service(rt.settings, rt.store, rt.regions, signing_secret=b"x" * 32)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(links()), SubmitRequest(idempotency_key=key))
    return job.id


def read(rt: Runtime, job_id: str) -> Job:
    try:
        return rt.store.get(job_id)
    except StoreUnavailable:  # our own connection was dropped too: the next call reconnects
        return rt.store.get(job_id)


def state(rt: Runtime, job_id: str) -> JobState:
    return read(rt, job_id).state


def assert_one_winner(rt: Runtime, env: Env, job_id: str, *, min_attempt: int = 1) -> None:
    """Succeeded with the artifact of its last attempt, intact; once the staging grace has passed, a
    sweep leaves that object as the job's only attempt object. Call with every worker stopped."""
    job = rt.store.get(job_id)
    assert job.state is JobState.SUCCEEDED, (job.state, job.last_error_code)
    art = rt.store.artifact(job_id)
    assert art is not None and art.attempt == job.attempt >= min_attempt
    keys = JobKeys(rt.settings.encryption, rt.settings.data_folder())  # the object is sealed: open it
    data = read_object(open_blob_store(env.storage_url), art.key, keys.key_for(row_key(job)))
    assert hashlib.sha256(data).hexdigest() == art.sha256
    # past any lease the test expired (that attempt ended then, by its clock) and the grace after it
    reconciler = env.reconciler_after(rt, EXPIRY_S + rt.settings.staging_grace_s + 1)
    try:
        reconciler.sweep_orphans()
    finally:
        reconciler.store.close()
    keys = [k for k in open_blob_store(env.storage_url).list("jobs") if "/attempts/" in k]
    assert keys == [art.key]


def log_text(env: Env, name: str) -> str:
    return (env.tmp / name).read_text()


@pytest.mark.parametrize("point", ["after_claim", "after_staging_upload", "before_commit"])
def test_sigkill_at_each_point_then_another_worker_wins(env: Env, point: str) -> None:
    rt = env.runtime()
    job_id = submit(rt)
    doomed = start_worker(env.env(DOCFENCE_FAULTS=f"{point}=kill"), env.tmp / "w1.log", "--no-reconcile")
    assert doomed.wait(timeout=HANG_GUARD_S) == -signal.SIGKILL
    assert state(rt, job_id) is JobState.RENDERING  # its lease is still there, held by a dead process
    assert env.expire_leases(rt) == [job_id]  # the reconciler's pass once that lease has run out
    rescuer = start_worker(env.env(), env.tmp / "w2.log")
    try:
        wait_for(lambda: state(rt, job_id).terminal, HANG_GUARD_S, "the job to end")
    finally:
        stop(rescuer)
    assert_one_winner(rt, env, job_id, min_attempt=2)
    assert [a.outcome for a in rt.store.attempts(job_id)] == ["lease_expired", "artifact_committed"]


def test_lease_expires_while_the_old_worker_keeps_running(env: Env) -> None:
    rt = env.runtime()
    job_id = submit(rt)
    barriers = env.barriers
    # The old worker renders and stages, then stops at its commit while its heartbeats stall too.
    # It takes one job only, so it cannot claim the requeued job itself.
    old = start_worker(env.env(DOCFENCE_FAULTS="heartbeat=wait:heartbeat,before_commit=wait:commit"),
                       env.tmp / "old.log", "--no-reconcile", "--max-jobs", "1")
    new = None
    try:
        barriers.wait_reached("before_commit")
        barriers.wait_reached("heartbeat")
        assert env.expire_leases(rt) == [job_id]  # its lease ran out while it kept running
        new = start_worker(env.env(), env.tmp / "new.log")
        wait_for(lambda: state(rt, job_id).terminal, HANG_GUARD_S, "the new attempt to end")
        barriers.release("commit")  # the old worker's late commit: it must be refused
        wait_for(lambda: "stale attempt" in log_text(env, "old.log"), HANG_GUARD_S, "the old commit refused")
        barriers.release("heartbeat")
        assert old.wait(timeout=HANG_GUARD_S) == 0
    finally:
        env.barriers.release("commit")
        env.barriers.release("heartbeat")
        if new is not None:
            stop(new)
        stop(old)
    assert_one_winner(rt, env, job_id, min_attempt=2)
    assert [a.outcome for a in rt.store.attempts(job_id)] == ["lease_expired", "artifact_committed"]


def test_duplicate_delivery_runs_once(env: Env) -> None:
    rt = env.runtime()
    first = submit(rt, key="same-request")
    assert submit(rt, key="same-request") == first
    workers = [start_worker(env.env(), env.tmp / f"w{i}.log") for i in range(2)]
    try:
        wait_for(lambda: state(rt, first).terminal, HANG_GUARD_S, "the job to end")
    finally:
        for w in workers:
            stop(w)
    assert_one_winner(rt, env, first)
    assert len(rt.store.attempts(first)) == 1 and rt.store.count_by_state()["succeeded"] == 1


def test_delayed_status_reads_never_see_success_without_artifact(env: Env) -> None:
    rt = env.runtime()
    job_id = submit(rt)
    seen: list[tuple[str, bool]] = []  # (state read, artifact found when read after a delay)
    first_read, stop_reading = threading.Event(), threading.Event()

    def reader() -> None:
        reader_rt = env.runtime()
        rng = random.Random(13)
        try:
            while not stop_reading.is_set():
                job = reader_rt.store.get(job_id)
                first_read.set()
                stop_reading.wait(rng.uniform(0, 0.3))  # the answer arrives late
                found = job.state is JobState.SUCCEEDED and reader_rt.store.artifact(job_id) is not None
                seen.append((job.state.value, found))
        finally:
            first_read.set()
            reader_rt.close()

    thread = threading.Thread(target=reader)
    thread.start()
    assert first_read.wait(HANG_GUARD_S)
    worker = start_worker(env.env(), env.tmp / "w.log")
    try:
        wait_for(lambda: state(rt, job_id).terminal, HANG_GUARD_S, "the job to end")
    finally:
        stop_reading.set()
        thread.join()
        stop(worker)
    assert_one_winner(rt, env, job_id)
    assert seen and {s for s, _ in seen} <= {"queued", "rendering", "succeeded"}
    assert all(found for s, found in seen if s == "succeeded")


def test_database_connection_dropped_during_heartbeat(env: Env) -> None:
    rt = env.runtime()
    job_id = submit(rt)
    # every heartbeat first loses its connection; the worker holds its result at the commit until
    # the test has seen the lease renewed after such a drop
    worker = start_worker(env.env(DOCFENCE_FAULTS="heartbeat=drop_db,before_commit=wait:commit"),
                          env.tmp / "w.log")
    try:
        env.barriers.wait_reached("before_commit")
        if env.db_url.startswith("postgresql"):
            with psycopg.connect(env.db_url, autocommit=True) as admin:  # a real server-side drop too
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        renewed_from = read(rt, job_id).lease_expires_at
        assert renewed_from is not None
        wait_for(lambda: (read(rt, job_id).lease_expires_at or renewed_from) > renewed_from,
                 HANG_GUARD_S, "a heartbeat to renew the lease over a new connection")
        env.barriers.release("commit")
        wait_for(lambda: state(rt, job_id).terminal, HANG_GUARD_S, "the job to end")
    finally:
        env.barriers.release("commit")
        stop(worker)
    assert_one_winner(rt, env, job_id)
    assert [a.outcome for a in rt.store.attempts(job_id)] == ["artifact_committed"]  # never lost


def test_failed_storage_write_is_retried_within_the_attempt(env: Env) -> None:
    """A storage outage is infrastructure, not document work: retried inside attempt 1, no attempt spent."""
    rt = env.runtime()
    job_id = submit(rt)
    worker = start_worker(env.env(DOCFENCE_FAULTS="storage_write=once:fail"), env.tmp / "w.log")
    try:
        wait_for(lambda: state(rt, job_id).terminal, HANG_GUARD_S, "the job to end")
    finally:
        stop(worker)
    assert_one_winner(rt, env, job_id)
    assert [a.outcome for a in rt.store.attempts(job_id)] == ["artifact_committed"]
