"""Rollback operations through the real CLI: pause claims for one mode, drain, route new jobs of a
class to another mode without touching existing jobs' stored policy, resume."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from docfence.config import load_settings
from docfence.core.states import JobState
from docfence.samples.pdfs import links
from docfence.service import Principal, Service, SubmitRequest
from docfence.testing.procs import long_budget_config, worker_env
from docfence.wiring import Runtime

ADMIN = Principal("ops", "t1", ("admin",))


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "docfence.cli", *args], env=env, capture_output=True,
                          text=True, timeout=600)  # a hang guard, never what is asserted


def test_pause_drain_set_mode_resume(tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    # long leases: a starved worker must not lose one (and a job with it) in the middle of the test
    env = worker_env(f"sqlite:///{tmp_path / 'db.sqlite'}", f"file://{tmp_path / 'o'}",
                     DOCFENCE_LEASE_TTL_S="120", **long_budget_config(tmp_path))
    rt = Runtime.open(load_settings(env=env))
    service = Service(rt.settings, rt.store, rt.regions, signing_secret=b"o" * 32)

    def submit(mode: str | None = None) -> str:
        job, _ = service.submit(ADMIN, io.BytesIO(links()), SubmitRequest(mode=mode))
        return str(job.id)

    raster, vector = submit("raster"), submit("vector")
    assert cli(env, "ops", "pause", "--mode", "raster", "--reason", "rollback").returncode == 0
    worked = cli(env, "worker", "--until-idle")
    assert worked.returncode == 0, worked.stderr
    assert rt.store.get(vector).state is JobState.SUCCEEDED
    assert rt.store.get(raster).state is JobState.QUEUED  # paused: never claimed
    drained = cli(env, "ops", "drain", "--timeout", "10")
    assert drained.returncode == 0 and "no valid leases" in drained.stdout
    assert cli(env, "ops", "set-mode", "default", "raster").returncode == 0
    routed = submit()
    assert rt.store.get(routed).mode == "raster" and rt.store.get(vector).policy.mode.value == "vector"
    status = json.loads(cli(env, "ops", "status", "--json").stdout)
    assert status["paused"] == ["raster"] and status["class_modes"] == {"default": "raster"}
    assert cli(env, "ops", "resume", "--mode", "raster").returncode == 0
    assert cli(env, "worker", "--until-idle").returncode == 0
    assert {rt.store.get(j).state for j in (raster, routed)} == {JobState.SUCCEEDED}
    actions = [e.action for e in rt.store.iter_audit() if e.chain == "operations"]
    assert actions == ["claims_paused", "class_mode_changed", "claims_resumed"]
