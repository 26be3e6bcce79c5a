"""Enqueue benchmark: one-page jobs created one at a time (one transaction each) against batches (one
transaction per batch), in the same run on a fresh database, at two levels: the store alone (insert,
audit event, wake-up) and the service (plus the sniffed, capped, fsynced upload of each input)."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docfence.benchmarks.queue import fresh_store_url
from docfence.config import Settings
from docfence.core.access import Principal
from docfence.core.clock import monotonic
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.samples import pdfs
from docfence.service import SubmitRequest, build_service
from docfence.store import open_store


def _rate(jobs: int, work: Callable[[], None]) -> float:
    t0 = monotonic()
    work()
    return jobs / max(monotonic() - t0, 1e-9)


def store_rates(url: str, jobs: int, batch: int) -> dict[str, float]:
    """Jobs/s through Store.submit (one transaction per job) and Store.submit_many (one per batch)."""
    store = open_store(url)
    policy = JobPolicy(deadline_s=3600, lease_ttl_s=30)
    try:
        def one_at_a_time() -> None:
            for i in range(jobs):
                store.submit(NewJob(tenant="bench", policy=policy, label="one", filename=f"f{i}.pdf"))

        def batched() -> None:
            for start in range(0, jobs, batch):
                store.submit_many([NewJob(tenant="bench", policy=policy, label="batch", filename=f"f{i}.pdf")
                                   for i in range(start, min(start + batch, jobs))])

        return {"one_at_a_time_jobs_s": round(_rate(jobs, one_at_a_time), 1),
                "batched_jobs_s": round(_rate(jobs, batched), 1)}
    finally:
        store.close()


def service_rates(url: str, jobs: int, batch: int, folder: Path) -> dict[str, float]:
    """Jobs/s through Service.submit and Service.submit_batch with a one-page PDF each, inputs kept
    in a local folder (each written and fsynced)."""
    settings = Settings(database_url=url, storage_url=f"file://{folder}/objects", signing_secret="b" * 32)
    service = build_service(settings)
    principal = Principal("bench", "bench", ("submit", "read"))
    pdf = pdfs.many_pages(1)
    try:
        def one_at_a_time() -> None:
            for i in range(jobs):
                service.submit(principal, io.BytesIO(pdf), SubmitRequest(label="one", filename=f"f{i}.pdf"))

        def batched() -> None:
            for start in range(0, jobs, batch):
                service.submit_batch(principal, [
                    (io.BytesIO(pdf), SubmitRequest(label="batch", filename=f"f{i}.pdf"))
                    for i in range(start, min(start + batch, jobs))])

        return {"one_at_a_time_jobs_s": round(_rate(jobs, one_at_a_time), 1),
                "batched_jobs_s": round(_rate(jobs, batched), 1)}
    finally:
        service.store.close()


def run(kind: str, jobs: int, batch: int, service_jobs: int | None = None) -> dict[str, Any]:
    """Both levels on fresh databases of `kind` (sqlite | postgres); the target judges the store level
    on PostgreSQL in batches of 100 (>= 3,000 jobs/s). `service_jobs` (default `jobs`): fewer jobs
    for the service level, whose fsynced uploads make it far slower."""
    with fresh_store_url(kind) as url:
        store_level = store_rates(url, jobs, batch)
    with fresh_store_url(kind) as url, tempfile.TemporaryDirectory(prefix="docfence-enqueue-") as tmp:
        service_level = service_rates(url, service_jobs or jobs, batch, Path(tmp))
    result: dict[str, Any] = {"bench": "enqueue", "store": kind, "jobs": jobs, "batch": batch,
                              "service_jobs": service_jobs or jobs,
                              "store_level": store_level, "service_level": service_level,
                              "speedup_store": round(store_level["batched_jobs_s"]
                                                     / store_level["one_at_a_time_jobs_s"], 2)}
    if kind == "postgres" and batch == 100:
        result["target_batched_jobs_s"] = 3000
        result["meets_target"] = store_level["batched_jobs_s"] >= 3000
    return result
