"""bench/enqueue.py still runs end to end and prints its figures (tiny sizes; real figures come from
the full run recorded in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docfence

BENCH = Path(docfence.__file__).parent.parent / "bench" / "enqueue.py"


def test_enqueue_bench_prints_both_levels() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--store", "sqlite", "--jobs", "20", "--batch", "10"],
                          capture_output=True, timeout=600, check=True)  # a hang guard only
    figures = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert figures["bench"] == "enqueue" and figures["store"] == "sqlite" and figures["jobs"] == 20
    for level in ("store_level", "service_level"):
        assert figures[level]["one_at_a_time_jobs_s"] > 0 and figures[level]["batched_jobs_s"] > 0
