"""Wake-up latency bench: how soon an idle worker process claims a submitted job, and how soon a
`GET /v1/jobs/{id}?wait=` held by an API server process answers once the commit that ends the job
returns. Real processes, real stores (SQLite file, PostgreSQL database), HTTP on loopback; one JSON
object per store on stdout.

    .venv/bin/python bench/wakeups.py --store sqlite|postgres|both [--samples 40] [--json]

submit_to_claim_ms: the job's claimed_at (the store's clock) minus the wall clock read just before
the submit call (Service.submit: input written and fsynced, job row committed), an upper bound of
the commit-to-claim delay; claim_after_submit_returned_ms: claimed_at minus the wall clock read when
the call returned (negative when the worker claimed before the call returned), which the target
flags judge, as the call's own work (input fsync, commit) is not the wake-up's. The worker is idle
(its previous job ended, then --idle-s of quiet) and keeps the default safety poll (--worker-poll-s,
1 s), so a figure far below it comes from the wake-up.
commit_to_answer_ms: from the return of the fenced commit (the bench plays the worker) to the HTTP
answer in the bench's client thread. The stores' clocks and the bench's are this host's.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ is sys.path[0] and bench/queue.py would shadow the stdlib `queue` module.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import contextlib
import hashlib
import io
import json
import os
import resource
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

import docfence
from docfence import storage_keys
from docfence.config import Settings
from docfence.core.clock import monotonic, utcnow
from docfence.core.interpreter import module_command
from docfence.core.records import ArtifactInfo
from docfence.harness.databases import temporary_pg_database
from docfence.harness.workers import start_worker, stop, worker_env
from docfence.samples.pdfs import links
from docfence.service import Principal, Service, SubmitRequest, build_service

TARGET_MS = 50.0
ADMIN = Principal("bench", "bench", ("admin",))


@contextlib.contextmanager
def database(kind: str, tmp: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp}/docfence.db"
    else:
        with temporary_pg_database("docfence_bench_wakeups") as url:
            yield url


def measure_claims(
    service: Service, db_url: str, storage_url: str, tmp: Path, args: Any
) -> tuple[list[float], list[float]]:
    """Submit one job at a time to an idle worker process. Returns, per job, claimed_at minus the start
    of the submit call and minus its return (negative: claimed before the call returned); the commit
    falls inside the call."""
    env = worker_env(db_url, storage_url, DOCFENCE_POLL_INTERVAL_S=str(args.worker_poll_s),
                     DOCFENCE_LEASE_TTL_S="30", DOCFENCE_HEARTBEAT_INTERVAL_S="5")
    worker = start_worker(env, tmp / "worker.log", "--no-reconcile")
    pdf = links()
    to_claim, after_return = [], []
    try:
        for i in range(args.samples + 1):
            time.sleep(args.idle_s)  # the worker finished its previous job and sleeps
            started = utcnow()
            job, _ = service.submit(ADMIN, io.BytesIO(pdf), SubmitRequest())
            returned = utcnow()
            _wait_until_ended(service, job.id)
            claimed = service.store.attempts(job.id)[0].claimed_at
            if i > 0:  # the first one also pays for the worker's start-up
                to_claim.append((claimed - started).total_seconds() * 1000.0)
                after_return.append((claimed - returned).total_seconds() * 1000.0)
    finally:
        stop(worker)
    return to_claim, after_return


def _wait_until_ended(service: Service, job_id: str, budget_s: float = 120.0) -> None:
    """Not measured: a plain poll, so the bench also runs against code without wake-ups."""
    until = monotonic() + budget_s
    while not service.store.get(job_id).state.terminal:
        if monotonic() > until:
            raise RuntimeError(f"job {job_id} did not end")
        time.sleep(0.05)


def measure_waits(service: Service, db_url: str, storage_url: str, args: Any) -> list[float]:
    """Hold `?wait=` on a queued job in an API server process, end the job, time the answer."""
    key = service.create_api_key("bench", ("submit", "read"), name="bench")[1]
    out = []
    with api_server(db_url, storage_url) as base, httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        for i in range(args.samples + 1):
            job, _ = service.submit(Principal("bench", "bench", ("submit",)), io.BytesIO(b"%PDF-1.4\n"),
                                    SubmitRequest())
            answered: dict[str, float] = {}
            thread = threading.Thread(target=_long_poll, args=(http, job.id, answered))
            thread.start()
            time.sleep(args.idle_s)  # the request is in the server, waiting
            finished = _finish(service, job.id)
            thread.join()
            if answered.get("state") != "succeeded":
                raise RuntimeError(f"?wait= answered {answered}")
            if i > 0:  # the first one also warms the server's code paths
                out.append((answered["at"] - finished) * 1000.0)
    return out


def _long_poll(http: httpx.Client, job_id: str, answered: dict[str, Any]) -> None:
    response = http.get(f"/v1/jobs/{job_id}", params={"wait": "20"})
    answered["at"] = monotonic()
    answered["state"] = response.json().get("state")


def _finish(service: Service, job_id: str) -> float:
    """Play the worker: claim, publish under the attempt's key, fenced commit; returns when it did."""
    claim = next(c for c in service.store.claim("bench-worker", limit=10) if c.job.id == job_id)
    data = b"%PDF-1.4 bench output\n"
    key = storage_keys.artifact_key(claim.job.tenant, job_id, claim.attempt)
    service.router.for_region(claim.job.region).put(key, data)
    info = ArtifactInfo(key=key, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), pages=1)
    service.store.complete(job_id, claim.attempt, "bench-worker", info)
    return monotonic()


@contextlib.contextmanager
def api_server(db_url: str, storage_url: str) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, DOCFENCE_DATABASE_URL=db_url, DOCFENCE_STORAGE_URL=storage_url)
    proc = subprocess.Popen(module_command("docfence.api", "--host", "127.0.0.1", "--port",
                                           str(port), "--log-level", "warning"), env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        until = monotonic() + 30
        while not _ready(base):
            if monotonic() > until or proc.poll() is not None:
                raise RuntimeError("the API server did not become ready")
            time.sleep(0.1)
        yield base
    finally:
        stop(proc)  # type: ignore[arg-type]


def _ready(base: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    return False


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"n": len(ordered), "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99),
            "max": round(ordered[-1], 2), "mean": round(sum(ordered) / len(ordered), 2)}


def run(kind: str, args: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="docfence-bench-") as tmp, database(kind, Path(tmp)) as url:
        storage = f"file://{tmp}/objects"
        service = build_service(Settings(database_url=url, storage_url=storage,
                                         signing_secret="bench-wakeups-secret"))
        try:
            claims, after_return = measure_claims(service, url, storage, Path(tmp), args)
            waits = measure_waits(service, url, storage, args)
        finally:
            service.store.close()
    claim_stats, late_stats, wait_stats = stats(claims), stats(after_return), stats(waits)
    return {
        "bench": "wakeups", "store": kind, "docfence": str(Path(docfence.__file__).parent),
        "worker_poll_s": args.worker_poll_s, "idle_s": args.idle_s,
        "submit_to_claim_ms": claim_stats, "claim_after_submit_returned_ms": late_stats,
        "commit_to_answer_ms": wait_stats,
        "target_ms": TARGET_MS,  # judged on the wake-up itself, not on the submit call's own work
        "p50_within_target": late_stats["p50"] <= TARGET_MS and wait_stats["p50"] <= TARGET_MS,
        "p99_within_target": late_stats["p99"] <= TARGET_MS and wait_stats["p99"] <= TARGET_MS,
        "bench_cpu_s": round(_cpu_s(), 2),
    }


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--worker-poll-s", type=float, default=1.0, help="the worker's safety poll")
    parser.add_argument("--idle-s", type=float, default=0.3, help="quiet before each measured commit")
    parser.add_argument("--json", action="store_true", help="print JSON lines (the default too)")
    args = parser.parse_args(argv)
    for kind in (["sqlite", "postgres"] if args.store == "both" else [args.store]):
        print(json.dumps(run(kind, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
