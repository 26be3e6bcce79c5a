"""Chaos soak: W real worker processes, a random one SIGKILLed (with its render children) every few
seconds (or every K finished jobs) and restarted, while N jobs flow. When every job has ended and every
worker has stopped, the harness waits out the reconciler's staging grace (the configured value) and
sweeps orphaned staging objects, then counts. Prints the promise's figures as one JSON object."""

from __future__ import annotations

import io
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from docfence.blobs import open_blob_store
from docfence.config import load_settings
from docfence.core.clock import monotonic, utcnow
from docfence.core.interpreter import module_command
from docfence.core.records import Job
from docfence.core.states import JobState
from docfence.harness.workers import start_worker, worker_env
from docfence.service import Principal, Service, SubmitRequest
from docfence.storage_keys import attempt_of_staging_key
from docfence.wiring import Runtime

PRINCIPAL = Principal("chaos", "chaos", ("admin",))
LEASE_TTL_S, RECONCILE_S = 2.0, 0.3
STAGING_GRACE_S = 1.0  # short, so the harness's wait for it is short; the value is in the JSON


@dataclass
class Kill:
    at: datetime
    pid: int
    jobs: list[tuple[str, int]] = field(default_factory=list)  # (job, attempt) it was rendering


def _submit_all(rt: Runtime, jobs: int, deadline_s: float) -> list[str]:
    from docfence.samples import pdfs

    docs = list(pdfs.all_samples().values())
    service = Service(rt.settings, rt.store, rt.regions, signing_secret=b"chaos" * 8)
    ids = []
    for i in range(jobs):
        doc = io.BytesIO(docs[i % len(docs)])
        job, _ = service.submit(PRINCIPAL, doc, SubmitRequest(deadline_s=deadline_s))
        ids.append(job.id)
    return ids


def _rendering_by(rt: Runtime, pid: int) -> list[tuple[str, int]]:
    return [(j.id, j.attempt) for j in rt.store.list_jobs(state=JobState.RENDERING, limit=1000)
            if j.lease_owner and f"-{pid}-" in j.lease_owner]


def _soak(rt: Runtime, env: dict[str, str], logs: Path, workers: int, kill_every: float,
          ids: list[str], timeout_s: float, kill_every_jobs: int = 0,
          standalone_reconciler: bool = False) -> list[Kill]:
    """Kill every `kill_every` seconds, and/or each time `kill_every_jobs` more jobs have ended (a
    schedule that does not depend on how fast this machine is, for tests). With
    `standalone_reconciler`, one `docfence reconcile` process runs too and is never killed (the
    workers' in-process reconcilers die with them)."""
    procs = [start_worker(env, logs / f"w{i}.log") for i in range(workers)]
    reconciler = _start_reconciler(env, logs / "reconciler.log") if standalone_reconciler else None
    kills: list[Kill] = []
    next_kill = monotonic() + kill_every
    next_kill_at_ended = kill_every_jobs
    end = monotonic() + timeout_s
    try:
        while monotonic() < end:
            counts = rt.store.count_by_state()
            pending = counts["queued"] + counts["rendering"]
            if pending == 0:
                break
            due = kill_every > 0 and monotonic() >= next_kill
            if kill_every_jobs > 0 and len(ids) - pending >= next_kill_at_ended:
                due, next_kill_at_ended = True, next_kill_at_ended + kill_every_jobs
            if due:
                victim = random.randrange(workers)
                pid = procs[victim].pid
                kills.append(Kill(utcnow(), pid, _rendering_by(rt, pid)))
                os.killpg(pid, signal.SIGKILL)  # the worker, its forkserver and render children
                procs[victim].wait()
                procs[victim] = start_worker(env, logs / f"w{victim}-{len(kills)}.log")
                next_kill += kill_every
            time.sleep(0.1)
    finally:
        for p in [*procs, *([reconciler] if reconciler else [])]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in [*procs, *([reconciler] if reconciler else [])]:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
    return kills


def _start_reconciler(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(module_command("docfence.cli", "reconcile"), env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _collect_after_grace(rt: Runtime, ids: list[str]) -> int:
    """Every worker has stopped: wait until the last attempt ended the configured staging grace ago
    (store clock), then sweep every object. Returns how many orphans the sweep deleted."""
    reconciler = rt.reconciler()
    grace = timedelta(seconds=reconciler.config.staging_grace_s)
    ended = [a.ended_at for i in ids for a in rt.store.attempts(i) if a.ended_at is not None]
    if ended:
        while rt.store.now() - max(ended) < grace:
            time.sleep(0.05)
    return len(reconciler.sweep_orphans())


def _figures(rt: Runtime, storage_url: str, ids: list[str], kills: list[Kill]) -> dict[str, Any]:
    jobs = [rt.store.get(i) for i in ids]
    states = [j.state for j in jobs]
    allowance = timedelta(seconds=2 * RECONCILE_S + 1)
    stale = 0
    for job in jobs:
        commits = [e for e in rt.store.audit_events(job.id) if e.action == "artifact_committed"]
        art = rt.store.artifact(job.id)
        if len(commits) > 1 or (art is not None and art.attempt != job.attempt):
            stale += 1
    collected = _collect_after_grace(rt, ids)
    committed = {a.key for j in jobs if (a := rt.store.artifact(j.id)) is not None}
    staged = [k for k in open_blob_store(storage_url).list("jobs") if attempt_of_staging_key(k) is not None]
    ttt = sorted((j.finished_at - j.created_at).total_seconds() for j in jobs if j.finished_at)
    delays = _reclaim_delays(rt, kills)
    bound = LEASE_TTL_S + RECONCILE_S + 1  # expected on an idle machine; a figure, not a test
    return {
        "jobs": len(jobs), "terminal": sum(s.terminal for s in states),
        "succeeded": states.count(JobState.SUCCEEDED), "failed": states.count(JobState.FAILED),
        "canceled": states.count(JobState.CANCELED), "stale_publishes": stale,
        "terminal_errors": _terminal_errors(jobs),
        "staging_grace_s": rt.settings.staging_grace_s, "orphans_collected_at_end": collected,
        "orphan_staged_objects": len([k for k in staged if k not in committed]),
        "missing_artifacts": len([k for k in committed if k not in set(staged)]),
        "deadline_violations": sum((j.finished_at or utcnow()) > j.deadline_at + allowance for j in jobs),
        "p50_time_to_terminal_s": round(statistics.median(ttt), 3) if ttt else None,
        "p99_time_to_terminal_s": round(ttt[min(len(ttt) - 1, int(len(ttt) * 0.99))], 3) if ttt else None,
        "kills": len(kills), "killed_mid_render": len(delays),
        "p50_reclaim_delay_s": round(statistics.median(delays), 3) if delays else None,
        "max_reclaim_delay_s": round(max(delays), 3) if delays else None,
        "reclaim_bound_s": bound, "reclaims_over_bound": sum(d > bound for d in delays),
    }


def _terminal_errors(jobs: list[Job]) -> dict[str, int]:
    """Failed and canceled jobs counted by their error code, so a soak says why a job did not succeed."""
    ended_badly = (JobState.FAILED, JobState.CANCELED)
    codes = Counter(j.last_error_code or "none" for j in jobs if j.state in ended_badly)
    return dict(sorted(codes.items()))


def _reclaim_delays(rt: Runtime, kills: list[Kill]) -> list[float]:
    delays = []
    for kill in kills:
        for job_id, attempt in kill.jobs:
            later = [a for a in rt.store.attempts(job_id) if a.attempt == attempt + 1]
            if later:
                delays.append((later[0].claimed_at - kill.at).total_seconds())
    return delays


def run(store: str, jobs: int, workers: int, kill_every: float, *, timeout_s: float = 600.0,
        deadline_s: float = 300.0, kill_every_jobs: int = 0, standalone_reconciler: bool = False,
        ) -> dict[str, Any]:
    from docfence.benchmarks.queue import fresh_store_url

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="docfence-chaos-")))
        db_url = stack.enter_context(fresh_store_url(store))
        (tmp / "objects").mkdir()
        storage_url = f"file://{tmp / 'objects'}"
        env = worker_env(db_url, storage_url, DOCFENCE_LEASE_TTL_S=str(LEASE_TTL_S),
                         DOCFENCE_RECONCILE_INTERVAL_S=str(RECONCILE_S),
                         DOCFENCE_STAGING_GRACE_S=str(STAGING_GRACE_S))
        rt = Runtime.open(load_settings(env=env))
        ids = _submit_all(rt, jobs, deadline_s)
        started = monotonic()
        kills = _soak(rt, env, tmp, workers, kill_every, ids, timeout_s, kill_every_jobs,
                      standalone_reconciler)
        result = {"store": store, "workers": workers, "kill_every_s": kill_every,
                  "standalone_reconciler": standalone_reconciler,
                  "wall_s": round(monotonic() - started, 2)}
        result.update(_figures(rt, storage_url, ids, kills))
        rt.close()
        return result
