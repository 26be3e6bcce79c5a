"""Several real OS processes claim from one SQLite file and one PostgreSQL database at once."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from docfence.store import open_store
from docfence.testing.queue_load import drain_worker, enqueue, run_processes
from docfence.testing.stores import temporary_pg_database


def _run(url: str, tmp_path: Path, jobs: int = 300, workers: int = 4) -> None:
    open_store(url).close()
    enqueue(url, jobs)
    logs = [tmp_path / f"claims-{i}.log" for i in range(workers)]
    # 2 ms of "rendering" per job outside transactions, as real work does: SQLite gives its write
    # lock to no one in particular, and back-to-back no-op transactions can starve the other writers.
    run_processes(drain_worker, lambda i, s: (url, f"w{i}", 3, s, str(logs[i]), 0.002), workers)
    claims = collections.Counter()
    holders = collections.defaultdict(set)
    for log in logs:
        for line in log.read_text().splitlines():
            job_id, attempt, worker = line.split()
            claims[(job_id, attempt)] += 1
            holders[job_id].add(worker)
    assert claims and max(claims.values()) == 1, "a (job, attempt) was held by two workers"
    assert sum(1 for log in logs if log.read_text()) >= 2, "only one process ever claimed"
    store = open_store(url, migrate=False)
    counts = store.count_by_state()
    assert counts["succeeded"] == jobs and counts["queued"] == counts["rendering"] == 0
    store.close()


def test_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    _run(f"sqlite:///{tmp_path / 'shared.db'}", tmp_path)


@pytest.mark.postgres
def test_processes_share_one_postgres_database(tmp_path: Path) -> None:
    with temporary_pg_database() as url:
        _run(url, tmp_path)
