"""The queue's hot statements stay on their indexes as finished jobs pile up, whether the planner has
fresh statistics or none (a sudden backlog): the claim reads jobs_claim_idx in order and updates the
picked rows by key; batched heartbeats, group commits and previous-hash lookups probe keys."""

from __future__ import annotations

import json
import re

import pytest

from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.store import bench


def _plan(store, name: str, params: dict, *, claim_tx: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    conn = store._conn()
    if store.dialect == "sqlite":
        return [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + store.queries[name], params)]
    lines: list[str] = []
    with pytest.raises(_Rollback), conn.transaction():  # the plan of the real transaction, undone
        if claim_tx:
            conn.execute(store.queries["claim_plan"])
        rows = conn.execute("EXPLAIN " + store.queries[name], params)
        lines = [str(next(iter(r.values()))) for r in rows]
        raise _Rollback
    return lines


class _Rollback(Exception):
    pass


def _job_indexes(store, plan: str) -> set[str]:  # type: ignore[no-untyped-def]
    """Which indexes of `jobs` a plan reads: "claim" (jobs_claim_idx), "key" (primary key), or the
    name of any other, which would mean a scan of every row in some state."""
    if store.dialect == "sqlite":
        used = re.findall(r"(?:SEARCH|SCAN) (?:jobs|q) USING (?:COVERING )?INDEX (\w+)", plan)
    else:
        used = re.findall(r"(?:Index|Index Only|Bitmap Index) Scan (?:Backward )?using (\w+)", plan)
        used = [u for u in used if u.startswith("jobs_")]
    names = {"jobs_claim_idx": "claim", "sqlite_autoindex_jobs_1": "key", "jobs_pkey": "key"}
    return {names.get(u, u) for u in used}


def _fill(store, *, analyze: bool) -> None:  # type: ignore[no-untyped-def]
    """A backlog of finished jobs, then a sudden queue: with `analyze`, the statistics describe the
    finished backlog alone (they say nothing is queued); without, there are none."""
    bench.fill_finished(store, 20_000)
    if analyze:
        store._conn().execute("ANALYZE" if store.dialect == "sqlite" else "ANALYZE jobs")
    for _ in range(500):
        store.submit(NewJob(tenant="t", policy=JobPolicy()))


@pytest.mark.parametrize("processors", [None, '["acme"]'], ids=["workers", "dispatcher"])
@pytest.mark.parametrize("analyze", [True, False], ids=["analyzed", "no-statistics"])
def test_claim_reads_its_partial_index_in_order_and_updates_by_key(store, analyze: bool,  # type: ignore[no-untyped-def]
                                                                   processors: str | None) -> None:
    """The workers' claim and the dispatcher's (report jobs of outside renderers, here none among the
    queued watermark jobs) take the same plan: never a scan of the finished backlog."""
    _fill(store, analyze=analyze)
    plan = _plan(store, "lease_acquired", {"worker": "w", "limit": 10, "now": None, "processors": processors,
                                          "to_state": "rendering", "attempt_bump": 1}, claim_tx=True)
    text = "\n".join(plan)
    if store.dialect == "sqlite":
        assert any("USING INDEX jobs_claim_idx" in d for d in plan), plan
        assert any("USING INDEX sqlite_autoindex_jobs_1 (id=?)" in d for d in plan), plan  # by key
        assert not any(d.startswith(("SCAN jobs", "SCAN q")) for d in plan), plan  # no table scan
        assert "TEMP B-TREE" not in text, plan
    else:
        assert "Index Scan using jobs_claim_idx" in text, text
        assert "Sort" not in text and "Seq Scan on jobs" not in text, text  # no gather-and-sort
    assert _job_indexes(store, text) == {"claim", "key"}, text  # picked in order, updated by key
    if processors is None:
        assert len(store.claim("w", limit=10)) == 10
    else:
        assert store.claim_provider_jobs("d", ["acme"], limit=10) == []  # no report job of acme queued


def test_batched_statements_probe_keys(store) -> None:  # type: ignore[no-untyped-def]
    _fill(store, analyze=False)
    claims = store.claim("w", limit=10)
    items = json.dumps([[c.job.id, c.attempt] for c in claims])
    for name, params in [
        ("heartbeat_many", {"leases": items, "worker": "w", "now": None}),
        ("artifact_committed", {"items": items, "worker": "w", "now": None, "from_state": "rendering",
                                "to_state": "succeeded"}),
        ("prev_audit_hashes", {"links": json.dumps([[c.job.id, 1] for c in claims])}),
    ]:
        text = "\n".join(_plan(store, name, params))
        assert "SCAN jobs" not in text and "SCAN e" not in text, (name, text)
        assert "Seq Scan on jobs" not in text and "Seq Scan on audit_events" not in text, (name, text)
        if name == "prev_audit_hashes":
            assert "(chain=? AND chain_seq=?)" in text or "audit_events_chain_chain_seq_key" in text, text
        else:
            assert _job_indexes(store, text) == {"key"}, (name, text)
    assert len(store.complete_many([], "w")) == 0
