"""A bounded chaos soak on both stores (DOCFENCE_SOAK=1 runs the full 300-job version).

The bounded run kills a busy worker each time 8 more jobs have ended, so how many kills happen does
not depend on this machine's speed. Reclaim times are figures in the benchmark's JSON, not asserted.
"""

from __future__ import annotations

import os

import pytest

from docfence.benchmarks.chaos import run

FULL = bool(os.environ.get("DOCFENCE_SOAK"))


@pytest.mark.soak
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_chaos_soak_keeps_the_promise(store: str) -> None:
    if FULL:
        result = run(store, 300, 4, 2.0, timeout_s=600)
    else:
        result = run(store, 40, 3, 0.0, timeout_s=600, kill_every_jobs=8)
    jobs = result["jobs"]
    assert result["terminal"] == jobs == (300 if FULL else 40), result
    assert result["stale_publishes"] == 0, result
    assert result["orphan_staged_objects"] == 0 and result["missing_artifacts"] == 0, result
    assert result["deadline_violations"] == 0, result
    assert result["kills"] >= 1, result
    assert sum(result["terminal_errors"].values()) == result["failed"] + result["canceled"], result
