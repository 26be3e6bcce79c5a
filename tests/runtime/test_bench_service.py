"""`docfence bench service` runs end to end on a tiny N (real server, real workers, qpdf loop); the
figures themselves come from full runs recorded in docs/benchmarks.md, never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from docfence.harness.workers import REPO


@pytest.mark.parametrize("extra", [[], ["--latency"]])
def test_bench_service_prints_its_figures(extra: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "docfence.cli", "bench", "service", "--jobs", "3",
                           "--workers", "1", "--pages", "2", "--json", *extra],
                          capture_output=True, timeout=900, check=True)  # a hang guard only
    figures = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert figures["bench"] == "service" and figures["engine"]["pages"] == 2
    assert figures["peak_rss_mb"]["per_worker"][0]["zygote_mb"] > 0
    assert figures["api_server_cpu_ms_per_job"] >= 0
    if extra:
        assert figures["latency"]["submit_wait_download_ms"]["n"] == 3
    else:
        assert figures["service"]["submit_to_succeeded_ms"]["n"] == 3
        assert figures["qpdf_loop"]["files_per_s"] > 0 and "per_job_overhead_ms" in figures


def test_rss_soak_reads_every_process_at_each_checkpoint() -> None:
    script = str(REPO / "bench" / "rss_soak.py")
    done = subprocess.run([sys.executable, script, "--jobs", "3", "--workers", "1", "--checkpoints", "1"],
                          capture_output=True, timeout=900, check=True)  # a hang guard only
    figures = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert [c["jobs"] for c in figures["checkpoints"]] == [1, 3]
    for checkpoint in figures["checkpoints"]:
        (process,) = checkpoint["processes"]
        assert process["worker"]["VmRSS"] > 0 and process["zygote"]["VmRSS"] > 0
    assert set(figures["growth_mb"][0]) == {"worker", "zygote"}
