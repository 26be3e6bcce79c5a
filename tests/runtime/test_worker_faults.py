"""Faults a real `docfence worker` process meets between claim and commit, on both stores: a poison job
(its region was removed from the configuration; an exception nobody expected) fails with a coded error
and an error id while the worker goes on to the next job; a heartbeat that never returns loses the lease
(the render is killed, nothing is staged) and the worker claims again once it returns; a failed storage
write is retried within the attempt, which still wins.

The order of events is set with fault-point barriers (`wait:NAME`), never with sleeps; `wait_for`
deadlines are only hang guards.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from docfence.blobs import open_blob_store
from docfence.config import load_settings
from docfence.core.records import Job
from docfence.core.states import JobState
from docfence.samples.pdfs import links
from docfence.service import Principal, Service, SubmitRequest
from docfence.storage_keys import staging_key
from docfence.testing.barriers import HANG_GUARD_S, Barriers
from docfence.testing.procs import start_worker, stop, wait_for, worker_env
from docfence.testing.stores import temporary_pg_database
from docfence.wiring import Runtime

PRINCIPAL = Principal("test", "t1", ("admin",))
LONG_BUDGET = "[limits]\nrender_base_s = 600.0\nrender_timeout_s = 600.0\n"  # testing/procs.py's
LEASE_TTL_S = "120"  # no lease runs out by accident; the heartbeat test sets its own


@dataclass
class Env:
    db_url: str
    tmp: Path

    @property
    def storage_url(self) -> str:
        return f"file://{self.tmp / 'objects'}"

    def config(self, name: str, toml: str) -> str:
        path = self.tmp / f"{name}.toml"
        path.write_text(LONG_BUDGET + toml)
        return str(path)

    def env(self, config: str, **extra: str) -> dict[str, str]:
        given = {"DOCFENCE_FAULTS_DIR": str(self.tmp), "DOCFENCE_LEASE_TTL_S": LEASE_TTL_S,
                 "DOCFENCE_CONFIG": config, **extra}
        return worker_env(self.db_url, self.storage_url, **given)

    def runtime(self, config: str, **extra: str) -> Runtime:
        return Runtime.open(load_settings(env=self.env(config, **extra)))

    def log(self, name: str = "w.log") -> str:
        path = self.tmp / name
        return path.read_text() if path.exists() else ""

    def log_lines(self, name: str = "w.log") -> list[dict[str, object]]:
        lines = [json.loads(line) for line in self.log(name).splitlines() if line.startswith("{")]
        return [x for x in lines if "msg" in x]  # log lines, not the counters printed at exit


@pytest.fixture(params=["sqlite", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    (tmp_path / "objects").mkdir()
    if request.param == "sqlite":
        yield Env(f"sqlite:///{tmp_path / 'jobs.db'}", tmp_path)
    else:
        with temporary_pg_database("docfence_wfault") as url:
            yield Env(url, tmp_path)


def submit(rt: Runtime, document_class: str | None = None) -> str:
    service = Service(rt.settings, rt.store, rt.regions, signing_secret=b"x" * 32)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(links()), SubmitRequest(document_class=document_class))
    return job.id


def terminal(rt: Runtime, job_id: str) -> JobState | None:
    state = rt.store.get(job_id).state
    return state if state.terminal else None


def poison_then_good(env: Env, api: Runtime, worker: subprocess.Popen[bytes], poison_class: str) -> Job:
    """Submit a job of `poison_class`, then once it failed a good one, which must succeed on the same
    worker; the poison job as it ended, with its error id logged at ERROR under its job id."""
    try:
        poison = submit(api, poison_class)
        assert wait_for(lambda: terminal(api, poison), HANG_GUARD_S, "the poison job") is JobState.FAILED
        good = submit(api)
        assert wait_for(lambda: terminal(api, good), HANG_GUARD_S, "the good job") is JobState.SUCCEEDED
        assert worker.poll() is None  # the worker never exited
    finally:
        assert stop(worker) == 0
    job = api.store.get(poison)
    found = re.fullmatch(r".*\(error id (err_[0-9a-f]+)\)", job.last_error_message or "")
    assert found, job.last_error_message
    logged = [x for x in env.log_lines() if found.group(1) in str(x["msg"])]
    assert logged and logged[0]["level"] == "error" and logged[0]["job_id"] == poison
    assert logged[0]["attempt"] == 1 and "Traceback" in str(logged[0]["msg"])
    return job


def test_a_job_whose_region_was_removed_fails_and_the_worker_goes_on(env: Env) -> None:
    (env.tmp / "eu").mkdir()
    regions = f'[regions]\nlocal = "{env.storage_url}"\neu = "file://{env.tmp / "eu"}"\n'
    api = env.runtime(env.config("api", regions + '[classes.eu]\nregion = "eu"\n'))
    # the poison job is stored in "eu", which the worker's configuration no longer has
    worker = start_worker(env.env(env.config("worker", "")), env.tmp / "w.log", "--no-reconcile")
    job = poison_then_good(env, api, worker, "eu")
    assert job.last_error_code == "region_not_approved"
    assert [a.outcome for a in api.store.attempts(job.id)] == ["permanent_error"]  # retrying cannot help
    api.close()


def test_an_unexpected_exception_fails_its_attempt_with_an_error_id_and_the_worker_goes_on(env: Env) -> None:
    config = env.config("poison", "[classes.poison]\nmax_attempts = 1\n")
    api = env.runtime(config)
    # the first claim raises an exception docfence does not know (InjectedFault, not a DocfenceError)
    worker = start_worker(env.env(config, DOCFENCE_FAULTS="after_claim=once:fail"), env.tmp / "w.log")
    job = poison_then_good(env, api, worker, "poison")
    assert job.last_error_code == "internal_error"
    assert re.fullmatch(r"internal error \(error id err_[0-9a-f]+\)", job.last_error_message or "")
    assert any("InjectedFault" in str(x["msg"]) for x in env.log_lines() if x["level"] == "error")
    api.close()


def test_a_heartbeat_that_never_returns_loses_the_lease_and_the_worker_claims_again(env: Env) -> None:
    config = env.config("worker", "")
    extra = {"DOCFENCE_LEASE_TTL_S": "4", "DOCFENCE_HEARTBEAT_INTERVAL_S": "0.4"}
    api = env.runtime(config, **extra)
    barriers = Barriers(env.tmp)
    # every heartbeat hangs until released (a black-holed connection), and the render holds until
    # released, so the lease is lost while the render runs
    worker = start_worker(env.env(config, DOCFENCE_FAULTS="heartbeat=wait:heartbeat,render=wait:render",
                                  **extra), env.tmp / "w.log")
    try:
        job_id = submit(api)
        barriers.wait_reached("render")
        barriers.wait_reached("heartbeat")
        wait_for(lambda: "render killed" in env.log(), HANG_GUARD_S, "the watchdog to end the attempt")
        assert "heartbeat abandoned" in env.log()
        assert not open_blob_store(env.storage_url).exists(staging_key("t1", job_id, 1))  # nothing staged
        assert len(barriers.arrivals("heartbeat")) == 1  # one heartbeat in flight, none piled up
        barriers.release("render")
        barriers.release("heartbeat")  # the partition heals: the late answer comes, then new heartbeats
        wait_for(lambda: terminal(api, job_id), HANG_GUARD_S, "the job to end")
        assert worker.poll() is None
    finally:
        barriers.release("render")
        barriers.release("heartbeat")
        assert stop(worker) == 0
    job = api.store.get(job_id)
    assert job.state is JobState.SUCCEEDED, (job.state, job.last_error_code)
    outcomes = [a.outcome for a in api.store.attempts(job_id)]
    assert outcomes[0] == "lease_expired" and outcomes[-1] == "artifact_committed", outcomes
    art = api.store.artifact(job_id)
    assert art is not None and art.attempt == job.attempt >= 2
    assert "claim failed" not in env.log()  # claimed again without an error loop
    api.close()


def test_a_failed_storage_write_is_retried_within_the_attempt(env: Env) -> None:
    config = env.config("worker", "")
    api = env.runtime(config)
    worker = start_worker(env.env(config, DOCFENCE_FAULTS="storage_write=once:fail"), env.tmp / "w.log")
    try:
        job_id = submit(api)
        wait_for(lambda: terminal(api, job_id), HANG_GUARD_S, "the job to end")
    finally:
        assert stop(worker) == 0
    job = api.store.get(job_id)
    assert job.state is JobState.SUCCEEDED and job.attempt == 1  # the outage spent no attempt
    assert [a.outcome for a in api.store.attempts(job_id)] == ["artifact_committed"]
    outage = [x for x in env.log_lines() if "storage outage" in str(x["msg"])]
    assert len(outage) == 1 and outage[0]["job_id"] == job_id and outage[0]["level"] == "warning"
    api.close()


def test_a_starting_worker_says_what_it_runs_on_without_urls(env: Env) -> None:
    config = env.config("worker", "")
    worker = start_worker(env.env(config), env.tmp / "w.log", "--no-reconcile")
    try:
        wait_for(lambda: "starting" in env.log(), HANG_GUARD_S, "the start line")
    finally:
        assert stop(worker) == 0
    (line,) = [x for x in env.log_lines() if "starting" in str(x["msg"])]
    text = str(line["msg"])
    dialect = "sqlite" if env.db_url.startswith("sqlite") else "postgres"
    assert f"store {dialect}" in text and "storage local=LocalBlobStore" in text and "classes default" in text
    assert f"pid {worker.pid}" in text and "file:" not in text and str(env.tmp) not in text
    assert line["level"] == "info"
