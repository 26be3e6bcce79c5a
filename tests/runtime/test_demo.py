"""`docfence demo` runs end to end on SQLite + a local folder and prints validated results."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

from docfence.testing.procs import REPO


def test_demo_runs_and_prints_validated_results(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "docfence.cli", "demo", "--dir", str(tmp_path / "demo")],
                         capture_output=True, text=True, timeout=600, cwd=REPO)  # hang guard
    assert out.returncode == 0, out.stdout + out.stderr
    results = re.findall(r"(job_\w+) +\S+ +(vector|raster) succeeded .*validation=ok", out.stdout)
    assert len(results) == 8 and {m for _, m in results} == {"vector", "raster"}
    assert "progress:" in out.stdout and "finished in" in out.stdout
    for sha, path in re.findall(r"sha256 ([0-9a-f]{64})\n +(\S+)", out.stdout):
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == sha  # the printed file is the artifact
