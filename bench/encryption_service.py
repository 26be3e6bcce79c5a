"""What encryption at rest costs a one-page job through the service: submit, a worker, a download per
job, with `[encryption] seal_new_jobs` on and off on the same tree (SQLite + a local folder), in
alternating rounds. Prints one JSON object: per round and mode the parent process's CPU per job
(`time.process_time`; the render itself runs in sandbox children and is not counted), split into
submit / worker / download, and the per-round difference, against the target of <= 2 ms.

Usage: python bench/encryption_service.py [--jobs N] [--rounds R]
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # bench/queue.py shadows queue

import argparse
import hashlib
import io
import json
import statistics
import tempfile
import time
from typing import Any

from docfence.blobs.regions import RegionRouter
from docfence.config import EncryptionConfig, Settings, WorkerConfig
from docfence.samples.pdfs import many_pages
from docfence.service import Service, SubmitRequest
from docfence.store.base import open_store
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.worker.runner import Worker

TARGET_MS = 2.0


def one_round(jobs: int, seal: bool) -> dict[str, Any]:
    """`jobs` one-page jobs submitted, run by a worker and downloaded; CPU ms per job of each step."""
    with tempfile.TemporaryDirectory(prefix="encbench-") as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/jobs.db", storage_url=f"file://{tmp}/objects",
                            limits=LONG_BUDGET_LIMITS, encryption=EncryptionConfig(seal_new_jobs=seal),
                            worker=WorkerConfig(poll_interval_s=3600.0, reconcile_in_process=False))
        store = open_store(settings.database_url)
        router = RegionRouter.from_config(settings.region_urls())
        service = Service(settings, store, router, signing_secret=b"s" * 32)
        principal = service.authenticate(service.create_api_key("t1", ("admin",))[1])
        doc = many_pages(1)
        worker = Worker(settings, store, router)
        try:
            worker.sandbox.start(wait=True)
            service.submit(principal, io.BytesIO(doc), SubmitRequest(label="warm"))  # zygote, key file
            worker.run(until_idle=True)
            c0 = time.process_time()
            ids = [service.submit(principal, io.BytesIO(doc), SubmitRequest(label=f"j{i}"))[0].id
                   for i in range(jobs)]
            c1 = time.process_time()
            worker.sandbox.close()
            worker = Worker(settings, store, router)  # a worker runs once; this one's zygote is cold
            succeeded = worker.run(until_idle=True).succeeded
            c2 = time.process_time()
            for job_id in ids:
                download = service.open_signed(service.artifact_url_token(principal, job_id))
                body = b"".join(download.chunks)
                download.close()
                assert hashlib.sha256(body).hexdigest() == download.sha256
            c3 = time.process_time()
        finally:
            worker.sandbox.close()
            store.close()
    per_job = 1000.0 / jobs
    return {"sealed": seal, "succeeded": succeeded, "submit_ms": round((c1 - c0) * per_job, 3),
            "worker_ms": round((c2 - c1) * per_job, 3), "download_ms": round((c3 - c2) * per_job, 3),
            "total_ms": round((c3 - c0) * per_job, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = []
    for _ in range(args.rounds):
        sealed, plain = one_round(args.jobs, True), one_round(args.jobs, False)
        rounds.append({"sealed": sealed, "plaintext": plain,
                       "cost_ms": round(sealed["total_ms"] - plain["total_ms"], 3)})
    cost = statistics.median(r["cost_ms"] for r in rounds)
    print(json.dumps({"jobs_per_round": args.jobs, "rounds": rounds, "median_cost_ms": cost,
                      "target_ms": TARGET_MS, "within_target": cost <= TARGET_MS,
                      "machine": {"cpus": os.cpu_count(), "load": os.getloadavg()[0]},
                      }, indent=1))


if __name__ == "__main__":
    main()
