"""A bounded chaos soak on both stores (DOCFENCE_SOAK=1 runs the full 300-job version)."""

from __future__ import annotations

import os

import pytest

from docfence.benchmarks.chaos import run

FULL = bool(os.environ.get("DOCFENCE_SOAK"))


@pytest.mark.soak
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_chaos_soak_keeps_the_promise(store: str) -> None:
    jobs = 300 if FULL else 40
    result = run(store, jobs, 4 if FULL else 3, 2.0 if FULL else 1.5, timeout_s=600)
    assert result["terminal"] == result["jobs"] == jobs, result
    assert result["stale_publishes"] == 0, result
    assert result["orphan_artifacts"] == 0 and result["missing_artifacts"] == 0, result
    assert result["deadline_violations"] == 0, result
    assert result["kills"] >= 2, result
    if result["max_reclaim_delay_s"] is not None:
        assert result["max_reclaim_delay_s"] <= result["reclaim_bound_s"], result
