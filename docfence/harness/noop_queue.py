"""A no-op queue load through the full job protocol (submit; claim, heartbeat and fenced group commit),
driven by the queue benchmark and by the concurrency tests that check no (job, attempt) is held twice."""

from __future__ import annotations

import time
from typing import Any

from docfence.core.clock import monotonic
from docfence.core.errors import StoreUnavailable
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, Completion, NewJob
from docfence.store import open_store

NOOP_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def drain_worker(url: str, worker: str, batch: int, start: Any, log_path: str | None,
                 work_s: float = 0.0) -> None:
    """Claim, heartbeat and commit no-op jobs until the queue stays empty. Logs (job, attempt) claims.
    `work_s` simulates rendering between claim and commit (outside any transaction)."""
    store = open_store(url, migrate=False)
    log = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
    start.wait()
    idle_since: float | None = None
    while True:
        try:
            claims = store.claim(worker, limit=batch)
        except StoreUnavailable:
            continue
        if not claims:
            idle_since = idle_since or monotonic()
            if monotonic() - idle_since > 0.5:
                break
            continue
        idle_since = None
        held = store.heartbeat_many([(c.job.id, c.attempt) for c in claims], worker)
        done = []
        for c in claims:
            if log:
                log.write(f"{c.job.id} {c.attempt} {worker}\n")
            if (c.job.id, c.attempt) not in held:
                continue  # lease lost: discard
            if work_s:
                time.sleep(work_s)
            done.append(Completion(c.job.id, c.attempt, ArtifactInfo(f"noop/{c.job.id}", NOOP_SHA, 0, 0)))
        while True:  # group commit; an attempt missing from the answer was stale and is discarded
            try:
                store.complete_many(done, worker)
                break
            except StoreUnavailable:
                continue  # busy or dropped: nothing was committed; try again while the leases hold
    if log:
        log.close()
    store.close()


def enqueue(url: str, jobs: int) -> float:
    store = open_store(url, migrate=False)
    policy = JobPolicy(deadline_s=3600, lease_ttl_s=30)
    t0 = monotonic()
    for _ in range(jobs):
        store.submit(NewJob(tenant="bench", policy=policy))
    elapsed = monotonic() - t0
    store.close()
    return jobs / elapsed
