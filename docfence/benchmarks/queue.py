"""Queue benchmark: no-op jobs through the full protocol (submit, claim, heartbeat, fenced commit,
audit) in W worker processes, beside a raw-SQL claim+commit loop and procrastinate's no-op drain."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from docfence.harness.noop_queue import drain_worker, enqueue
from docfence.harness.processes import run_processes
from docfence.store import bench, open_store


def raw_worker(url: str, worker: str, start: Any) -> None:
    store = open_store(url, migrate=False)
    start.wait()
    while bench.raw_cycle(store, worker):
        pass
    store.close()


@contextmanager
def fresh_store_url(kind: str) -> Iterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="docfence-bench-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'bench.db'}"
    elif kind == "postgres":
        from docfence.harness.databases import temporary_pg_database

        with temporary_pg_database("docfence_bench") as url:
            yield url
    else:
        raise ValueError("store must be sqlite or postgres")


def measure_docfence(kind: str, jobs: int, workers: int, batch: int, backlog: int) -> dict[str, Any]:
    with fresh_store_url(kind) as url:
        store = open_store(url)
        if backlog:
            bench.fill_finished(store, backlog)
            _analyze(store)
        store.close()
        enqueue_rate = enqueue(url, jobs)
        elapsed = run_processes(drain_worker, lambda i, s: (url, f"w{i}", batch, s, None), workers)
        check = open_store(url, migrate=False)
        counts = check.count_by_state()
        check.close()
    if counts["succeeded"] != jobs + backlog:
        raise RuntimeError(f"not every job finished: {counts}")
    return {"enqueue_per_s": round(enqueue_rate, 1), "drain_per_s": round(jobs / elapsed, 1)}


def measure_raw(kind: str, jobs: int, workers: int) -> float:
    with fresh_store_url(kind) as url:
        open_store(url).close()
        enqueue(url, jobs)
        elapsed = run_processes(raw_worker, lambda i, s: (url, f"r{i}", s), workers)
    return round(jobs / elapsed, 1)


def _analyze(store: Any) -> None:
    """ANALYZE the backlog, the situation in which SQLite's planner may abandon a partial index."""
    if store.dialect == "sqlite":
        store._conn().execute("ANALYZE")
    else:
        with store._conn().transaction():
            store._conn().execute("ANALYZE jobs")


def run(kind: str, jobs: int, workers: int, *, batch: int = 10, backlog: int = 0,
        baselines: bool = True) -> dict[str, Any]:
    result: dict[str, Any] = {"store": kind, "jobs": jobs, "workers": workers, "batch": batch,
                              "finished_backlog": backlog}
    result.update(measure_docfence(kind, jobs, workers, batch, backlog))
    if baselines:
        raw = measure_raw(kind, jobs, workers)
        result["raw_drain_per_s"] = raw
        result["ratio_vs_raw"] = round(result["drain_per_s"] / raw, 2)
        if kind == "postgres":
            from docfence.benchmarks.procrastinate_baseline import measure_procrastinate

            proc = measure_procrastinate(jobs, workers)
            result["procrastinate_drain_per_s"] = proc
            result["ratio_vs_procrastinate"] = round(result["drain_per_s"] / proc, 2) if proc else None
    result["cpu_count"] = os.cpu_count()
    return result
