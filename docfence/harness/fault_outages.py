"""Outage scenarios: a PostgreSQL restart during a run of many jobs (on a private server, so nothing else
on the machine shares the outage), and the object store unavailable for a while (a local folder made
read-only for workers that are not root, or the S3 protocol server stopped and started again)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg

from docfence.harness.cluster import Cluster
from docfence.harness.cluster_rows import JobRow, Rows
from docfence.harness.fault_runs import HANG_GUARD_S, Verdict, deployment, judge, release, wait_reached
from docfence.harness.pg_server import private_postgres
from docfence.harness.workers import wait_for
from docfence.samples.pdfs import links

__all__ = ["pg_restart", "storage_outage"]

PG_DOWN_S = 7.0  # how long the restarted server stays down
OUTAGE_S = 10.0  # how long the object store is unavailable
TIME_LEFT_S = 60.0  # a job that failed with this much of its deadline left failed because of the outage
S3_BUCKET, S3_REGION = "docfence-faults", "us-east-1"


def _error_code(answer: httpx.Response) -> str:
    try:
        return str(answer.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


class Submitter(threading.Thread):
    """Submits `count` jobs, each retried under its idempotency key until accepted (as a client does):
    `before` of them at once, the rest once `go` is set (the outage began), each after reading the last
    accepted job. Records every answer as (status, error code); (0, "transport") when none came."""

    def __init__(self, c: Cluster, count: int, before: int, prefix: str) -> None:
        super().__init__(daemon=True)
        self.c, self.count, self.before, self.prefix = c, count, before, prefix
        self.accepted: list[str] = []
        self.answers: list[tuple[int, str]] = []
        self.go, self.stop = threading.Event(), threading.Event()

    def run(self) -> None:
        for i in range(self.count):
            if i == self.before:
                self.go.wait(HANG_GUARD_S)
            while not self.stop.is_set():
                if i >= self.before and self.accepted:
                    self._call(lambda: self._read(self.accepted[-1]))
                answer = self._call(lambda key=f"{self.prefix}-{i}": self.c.submit(  # type: ignore[misc]
                    links(), key=key, deadline_s=300, timeout=60))
                if answer is not None and answer.status_code in (200, 201):
                    self.accepted.append(str(answer.json()["id"]))
                    break
                self.stop.wait(0.2)  # 503 or no answer: the client retries with the same key

    def _read(self, job_id: str) -> httpx.Response:
        auth = {"Authorization": f"Bearer {self.c.api_key}"}
        return httpx.get(f"{self.c.base_url}/v1/jobs/{job_id}", headers=auth, timeout=60)

    def _call(self, request: Callable[[], httpx.Response]) -> httpx.Response | None:
        try:
            answer = request()
        except httpx.HTTPError:
            self.answers.append((0, "transport"))
            return None
        self.answers.append((answer.status_code, _error_code(answer)))
        return answer


def _bad_answers(answers: list[tuple[int, str]]) -> list[tuple[int, str]]:
    return [a for a in answers if not (200 <= a[0] < 300 or a == (503, "store_unavailable"))]


def pg_restart(root: Path, store: str = "postgres", *, soak: bool = False) -> Verdict:
    """PostgreSQL restarted (down PG_DOWN_S) while jobs are submitted and processed: the API answers
    only 2xx or 503 store_unavailable, workers reconnect by themselves, every accepted job ends by its
    deadline, the audit chain verifies."""
    v = Verdict("pg_restart", store)
    jobs = 100 if soak else 20
    with private_postgres() as server:
        with psycopg.connect(server.admin_url, autocommit=True) as admin:
            admin.execute('CREATE DATABASE "docfence"')
        with deployment(root, "postgres", db_url=server.url_for("docfence")) as c:
            c.start_api()
            c.start_reconciler()
            for i in range(2):
                c.start_worker(f"w{i}")
            submitter = Submitter(c, jobs, jobs // 2, "restart")
            submitter.start()
            _wait(lambda: _running(c, ["w0", "w1"], jobs // 4))  # the outage meets running processes
            submitter.go.set()  # the other half is submitted into the outage and after it
            server.restart(PG_DOWN_S)
            submitter.join(HANG_GUARD_S)
            submitter.stop.set()
            c.wait_terminal(submitter.accepted, HANG_GUARD_S)
            bad = _bad_answers(submitter.answers)
            v.check("api_only_2xx_or_503_store_unavailable", not bad, f"{bad[:5]}")
            v.check("all_submitted", len(submitter.accepted) == jobs, f"{len(submitter.accepted)} of {jobs}")
            v.check("no_process_exited", all(c.alive(n) for n in c.procs),
                    f"{ {n: p.poll() for n, p in c.procs.items()} }")
            audit = c.cli("audit", "verify", "--json")
            v.check("audit_chain_intact", audit.returncode == 0, audit.stdout.decode()[-300:])
            v.figures["answers_503"] = float(sum(a[0] == 503 for a in submitter.answers))
            return judge(c, v, submitter.accepted)


def _wait(predicate: Callable[[], bool]) -> None:
    wait_for(predicate, HANG_GUARD_S, "the deployment to be working before the restart")


def _running(c: Cluster, workers: list[str], succeeded: int) -> bool:
    """Every one of `workers` has claimed a job and `succeeded` jobs have succeeded."""
    rows = Rows(c.db_url)
    jobs = rows.jobs()
    claimers = {str(a["worker"]) for j in jobs for a in rows.attempts(j)}
    up = all(any(f"-{c.procs[w].pid}-" in who for who in claimers) for w in workers)
    return up and sum(j.state == "succeeded" for j in jobs.values()) >= succeeded


@contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """Every folder under `folder` read-only (to processes without root's overrides) while inside."""
    dirs = [folder, *(p for p in folder.rglob("*") if p.is_dir())]
    for d in dirs:
        d.chmod(0o555)
    try:
        yield
    finally:
        for d in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
            d.chmod(0o755)


@contextmanager
def _moto(port: int = 0) -> Iterator[tuple[object, int]]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield server, int(server.get_host_and_port()[1])
    finally:
        server.stop()


@contextmanager
def _aws_environment() -> Iterator[dict[str, str]]:
    """Dummy credentials for moto, in this process (to read the objects) and for the deployment."""
    values = {"AWS_ACCESS_KEY_ID": "faults", "AWS_SECRET_ACCESS_KEY": "faults", "AWS_CONFIG_FILE": os.devnull,
              "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield values
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def storage_outage(root: Path, store: str, *, soak: bool = False, blobs: str = "local") -> Verdict:
    """The object store unavailable for OUTAGE_S while workers are about to render and stage: no job
    with TIME_LEFT_S of its deadline left fails; every job ends by its deadline."""
    v = Verdict(f"storage_outage_{blobs}", store)
    jobs = 40 if soak else 6
    if blobs == "local":
        with deployment(root, store, unprivileged=True) as c:
            return _outage_run(c, v, jobs, lambda: _read_only(root / "objects"))
    with _aws_environment() as aws, _moto() as (server, port):
        import boto3

        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name=S3_REGION).create_bucket(
            Bucket=S3_BUCKET)
        url = f"s3://{S3_BUCKET}/objects?endpoint_url=http://127.0.0.1:{port}&region={S3_REGION}"
        holder = {"server": server}
        with deployment(root, store, storage_url=url, extra_env=aws) as c:
            return _outage_run(c, v, jobs, lambda: _moto_down(holder, port))


@contextmanager
def _moto_down(holder: dict[str, object], port: int) -> Iterator[None]:
    from moto.server import ThreadedMotoServer

    holder["server"].stop()  # type: ignore[attr-defined]
    try:
        yield
    finally:  # the same process's moto keeps its objects across a stop and a start
        again = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        again.start()
        holder["server"] = again


def _outage_run(c: Cluster, v: Verdict, jobs: int, outage: object) -> Verdict:
    c.start_api()
    c.start_reconciler()
    for i in range(2):
        c.start_worker(f"w{i}", faults="after_claim=wait:outage", batch=1)
    ids = [i for i in (_accepted(c.submit(links(), deadline_s=300)) for _ in range(jobs)) if i]
    wait_reached(c, "after_claim", processes=2)  # both workers are up and hold a job each
    with outage():  # type: ignore[operator]
        release(c, "outage")  # claimed jobs render and stage into the outage
        time.sleep(OUTAGE_S)  # the outage's length is the fault itself
    c.wait_terminal(ids, HANG_GUARD_S)
    rows = Rows(c.db_url).jobs()
    early = [j for j in ids if rows[j].state == "failed" and _time_left(rows[j]) >= TIME_LEFT_S]
    v.check("no_failure_with_60s_left", not early,
            f"{len(early)} failed: {sorted({rows[j].error_code or '' for j in early})}")
    v.check("no_worker_exited", all(c.alive(f"w{i}") for i in range(2)))
    v.check("all_submitted", len(ids) == jobs)
    return judge(c, v, ids)


def _time_left(job: JobRow) -> float:
    """Seconds of its deadline a terminal job had left when it ended."""
    return (job.deadline_at - job.finished_at).total_seconds() if job.finished_at else 0.0


def _accepted(answer: httpx.Response) -> str | None:
    return str(answer.json()["id"]) if answer.status_code in (200, 201) else None
