"""The claim stays on its partial index when finished jobs pile up and the planner has statistics
(SQLite's planner could otherwise abandon a partial index after ANALYZE and scan every claim)."""

from __future__ import annotations

from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob


def test_claim_uses_the_partial_index_after_analyze_on_a_backlog(store) -> None:  # type: ignore[no-untyped-def]
    store.bench_fill_finished(20_000)
    for _ in range(50):
        store.submit(NewJob(tenant="t", policy=JobPolicy()))
    conn = store._conn()
    if store.dialect == "sqlite":
        conn.execute("ANALYZE")
        sql = store.queries["claim_jobs"]
        details = [str(r[3]) for r in conn.execute(
            "EXPLAIN QUERY PLAN " + sql, {"worker": "w", "limit": 10, "now": None})]
        assert any("USING INDEX jobs_claim_idx" in d for d in details), details
        assert not any(d.startswith(("SCAN jobs", "SCAN q")) for d in details), details  # no table scan
    else:
        conn.execute("ANALYZE jobs")
        params = {"worker": "w", "limit": 10, "now": None}
        rows = conn.execute("EXPLAIN " + store.queries["claim_jobs"], params)
        plan = "\n".join(str(next(iter(r.values()))) for r in rows)
        assert "jobs_claim_idx" in plan and "Seq Scan on jobs" not in plan, plan
    assert len(store.claim("w", limit=10)) == 10
