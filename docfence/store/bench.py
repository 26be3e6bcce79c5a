"""Benchmark-only store operations (queries/<dialect>/bench.sql): a backlog of finished jobs and a bare
claim-and-commit cycle, the practical limit the real protocol is measured against. Never used by the
service, the workers or the maintenance passes."""

from __future__ import annotations

import json

from docfence.core.errors import StaleAttempt
from docfence.core.policy import JobPolicy
from docfence.store.sqlstore import SqlStore


def fill_finished(store: SqlStore, n: int) -> None:
    """Add `n` finished jobs so claims run against a realistic backlog."""
    with store._tx() as tx:
        tx.run("set_statement_timeout", statement_timeout="0")  # a big back-fill outlasts the session's bound
        tx.run("bench_fill_finished", n=n, policy=json.dumps(JobPolicy().to_dict()))


def raw_cycle(store: SqlStore, worker: str) -> bool:
    """One bare claim and one bare fenced commit (no audit, no attempt row); False when nothing was
    queued. Raises StaleAttempt if the commit lost its row."""
    with store._tx() as tx:
        tx.send("claim_plan")  # the raw loop gets the same pinned plan as the real claim
        row = tx.one("bench_raw_claim", worker=worker)
    if row is None:
        return False
    with store._tx() as tx:
        if tx.run("bench_raw_commit", id=row["id"], attempt=row["attempt"]) != 1:
            raise StaleAttempt("raw commit lost its row")
    return True
