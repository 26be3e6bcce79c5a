"""The seed's fault matrix with real worker processes killed by real signals, on both stores.

Each case ends with exactly one durable artifact whose sha256 matches, or an explicit terminal
error, and no stale attempt ever wins.
"""

from __future__ import annotations

import hashlib
import io
import random
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from docfence.blobs import open_blob_store
from docfence.config import load_settings
from docfence.core.errors import StoreUnavailable
from docfence.core.states import JobState
from docfence.engines.samples import links
from docfence.runtime import Runtime
from docfence.service import Principal, Service, SubmitRequest
from docfence.testing.procs import start_worker, stop, wait_for, worker_env
from docfence.testing.stores import temporary_pg_database

PRINCIPAL = Principal("test", "t1", ("admin",))


@dataclass
class Env:
    db_url: str
    storage_url: str
    root: Path
    tmp: Path

    def env(self, **extra: str) -> dict[str, str]:
        return worker_env(self.db_url, self.storage_url, DOCFENCE_FAULTS_DIR=str(self.tmp), **extra)

    def runtime(self) -> Runtime:
        return Runtime.open(load_settings(env=self.env()))


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


def state(rt: Runtime, job_id: str) -> JobState:
    try:
        return rt.store.get(job_id).state
    except StoreUnavailable:  # our own connection was dropped too: the next call reconnects
        return rt.store.get(job_id).state


def assert_one_winner(rt: Runtime, env: Env, job_id: str, *, min_attempt: int = 1) -> None:
    job = rt.store.get(job_id)
    assert job.state is JobState.SUCCEEDED, (job.state, job.last_error_code)
    art = rt.store.artifact(job_id)
    assert art is not None and art.attempt == job.attempt >= min_attempt
    data = open_blob_store(env.storage_url).get(art.key)
    assert hashlib.sha256(data).hexdigest() == art.sha256
    # orphans of other attempts are collected; only the winner's object remains
    def only_winner() -> bool:
        rt.reconciler().collect_orphans()
        keys = [k for k in open_blob_store(env.storage_url).list("jobs") if "/attempts/" in k]
        return keys == [art.key]
    wait_for(only_winner, 10, "orphaned staging objects to be deleted")


@pytest.mark.parametrize("point", ["after_claim", "after_staging_upload", "before_commit"])
def test_sigkill_at_each_point_then_another_worker_wins(env: Env, point: str) -> None:
    rt = env.runtime()
    job_id = submit(rt)
    doomed = start_worker(env.env(DOCFENCE_FAULTS=f"{point}=kill"), env.tmp / "w1.log", "--no-reconcile")
    assert doomed.wait(timeout=60) == -signal.SIGKILL
    assert state(rt, job_id) is JobState.RENDERING  # its lease is still there, held by a dead process
    rescuer = start_worker(env.env(), env.tmp / "w2.log")
    try:
        wait_for(lambda: state(rt, job_id).terminal, 60, "the job to end")
    finally:
        stop(rescuer)
    assert_one_winner(rt, env, job_id, min_attempt=2)
    assert [a.outcome for a in rt.store.attempts(job_id)] == ["lease_expired", "artifact_committed"]


def test_lease_expires_while_the_old_worker_keeps_running(env: Env) -> None:
    rt = env.runtime()
    job_id = submit(rt)
    # heartbeats stall (lease expires) and the commit comes late: the old worker must lose. It takes
    # one job only: its stalled heartbeats would lose every later attempt too, and as the first to
    # wake when the job is requeued it could use up the job's attempts before the new worker claims.
    old = start_worker(env.env(DOCFENCE_FAULTS="heartbeat=sleep:6,before_commit=sleep:5"),
                       env.tmp / "old.log", "--no-reconcile", "--max-jobs", "1")
    wait_for(lambda: rt.store.get(job_id).attempt == 1, 30, "the old worker to claim")
    new = start_worker(env.env(), env.tmp / "new.log")
    try:
        wait_for(lambda: state(rt, job_id).terminal, 60, "the new attempt to win")
        wait_for(lambda: "stale attempt" in (env.tmp / "old.log").read_text(), 30, "the old commit refused")
    finally:
        stop(new)
        stop(old)
    assert_one_winner(rt, env, job_id, min_attempt=2)


def test_duplicate_delivery_runs_once(env: Env) -> None:
    rt = env.runtime()
    first = submit(rt, key="same-request")
    assert submit(rt, key="same-request") == first
    workers = [start_worker(env.env(), env.tmp / f"w{i}.log") for i in range(2)]
    try:
        wait_for(lambda: state(rt, first).terminal, 60, "the job to end")
    finally:
        for w in workers:
            stop(w)
    assert_one_winner(rt, env, first)
    assert len(rt.store.attempts(first)) == 1 and rt.store.count_by_state()["succeeded"] == 1


def test_delayed_status_reads_never_see_success_without_artifact(env: Env) -> None:
    rt = env.runtime()
    job_id = submit(rt)
    seen: list[str] = []
    stop_reading = threading.Event()

    def reader() -> None:
        reader_rt = env.runtime()
        while not stop_reading.is_set():
            job = reader_rt.store.get(job_id)
            stop_reading.wait(random.uniform(0, 0.3))  # the answer arrives late
            if job.state is JobState.SUCCEEDED:
                assert reader_rt.store.artifact(job_id) is not None
            seen.append(job.state.value)
        reader_rt.close()

    thread = threading.Thread(target=reader)
    thread.start()
    worker = start_worker(env.env(), env.tmp / "w.log")
    try:
        wait_for(lambda: state(rt, job_id).terminal, 60, "the job to end")
    finally:
        stop_reading.set()
        thread.join()
        stop(worker)
    assert_one_winner(rt, env, job_id)
    assert seen and set(seen) <= {"queued", "rendering", "succeeded"}


def test_database_connection_dropped_during_heartbeat(env: Env) -> None:
    rt = env.runtime()
    job_id = submit(rt)
    # each heartbeat first loses its connection and then stalls past half the lease
    worker = start_worker(env.env(DOCFENCE_FAULTS="heartbeat=drop_db,render=sleep:3"), env.tmp / "w.log")
    try:
        if env.db_url.startswith("postgresql"):
            wait_for(lambda: state(rt, job_id) is JobState.RENDERING, 30, "a claim")
            with psycopg.connect(env.db_url, autocommit=True) as admin:  # a real server-side drop too
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        wait_for(lambda: state(rt, job_id).terminal, 60, "the job to end")
    finally:
        stop(worker)
    assert_one_winner(rt, env, job_id)


def test_failed_storage_write_is_retried_then_succeeds(env: Env) -> None:
    rt = env.runtime()
    job_id = submit(rt)
    worker = start_worker(env.env(DOCFENCE_FAULTS="storage_write=once:fail"), env.tmp / "w.log")
    try:
        wait_for(lambda: state(rt, job_id).terminal, 60, "the job to end")
    finally:
        stop(worker)
    assert_one_winner(rt, env, job_id, min_attempt=2)
    assert rt.store.attempts(job_id)[0].error_code == "storage_error"
