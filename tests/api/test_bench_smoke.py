"""bench/api_load.py still runs end to end (a tiny load; the real figures come from the full run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docfence

BENCH = Path(docfence.__file__).parent.parent / "bench" / "api_load.py"


def test_api_load_bench_prints_its_figures() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--json", "--rate", "40", "--duration", "1"],
                          capture_output=True, timeout=600, check=True)  # a hang guard only
    figures = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert figures["bench"] == "api_load" and figures["kinds"]["get"]["errors"] == 0
    assert figures["kinds"]["get"]["count"] + figures["kinds"]["submit"]["count"] == 40
    assert set(figures["kinds"]["get"]) >= {"p50_ms", "p99_ms", "rps"}
