"""A job that failed validation shows its attempt's whole report (every failed check, which page, what
differed) in the service's job view, GET /v1/jobs/{id}, `docfence inspect` (text and --json, the
console's view), on SQLite and PostgreSQL, through a real worker. Never document text."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from docfence.blobs import RegionRouter
from docfence.samples import pdfs
from docfence.worker.runner import Worker

from .conftest import ApiEnv

#: A watermark nobody can see (white, 1 % opaque): the output fails its fidelity validation.
INVISIBLE = {"text": "CONFIDENTIAL", "color": [1.0, 1.0, 1.0], "opacity": 0.01}
DETAIL = "pages 1-2: watermark not visible when rendered"
HANG_GUARD_S = 300.0  # only stops a broken build from hanging; nothing asserts on durations


def _inspect(env: ApiEnv, *args: str) -> subprocess.CompletedProcess[str]:
    cli_env = {k: v for k, v in os.environ.items() if k != "DOCFENCE_CONFIG"}
    cli_env.update(DOCFENCE_DATABASE_URL=env.settings.database_url,
                   DOCFENCE_STORAGE_URL=env.settings.storage_url)
    return subprocess.run([sys.executable, "-m", "docfence.cli", "inspect", *args], cwd=env.tmp,
                          capture_output=True, text=True, timeout=HANG_GUARD_S, env=cli_env, check=False)


def test_a_failed_jobs_views_carry_its_validation_report(any_env: ApiEnv) -> None:
    env = any_env
    with env.client() as client:
        job = client.submit(pdfs.links(), watermark=INVISIBLE)
        worker = Worker(env.settings, env.store, RegionRouter.from_config(env.settings.region_urls()))
        assert worker.run(until_idle=True).failed == 1
        assert client.get(job.id).error_code == "validation_failed"

    detail = env.service.describe(env.store.get(job.id))
    report = detail.failed_validation
    assert report is not None and report["attempt"] == 1 and report["ok"] is False
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert failed["watermark_rendered"]["details"] == [DETAIL]
    assert any(c["ok"] for c in report["checks"])  # the passing checks are part of the report

    with env.client() as client:  # GET /v1/jobs/{id} carries the same report
        over_api = client.get(job.id).raw["validation"]
    assert over_api["attempt"] == 1 and over_api["ok"] is False
    assert {c["name"]: c["details"] for c in over_api["checks"] if not c["ok"]} == {
        name: c["details"] for name, c in failed.items()}

    as_json = json.loads(_inspect(env, job.id, "--json").stdout)
    shown = as_json["validation"]
    assert shown["attempt"] == 1 and shown["ok"] is False
    assert {c["name"]: c["details"] for c in shown["checks"] if not c["ok"]} == {
        name: c["details"] for name, c in failed.items()}
    text = _inspect(env, job.id)
    assert text.returncode == 0, text.stderr
    assert "validation FAILED: watermark_rendered" in text.stdout and "attempt 1)" in text.stdout
    assert f"  watermark_rendered: {DETAIL}" in text.stdout
    assert "CONFIDENTIAL" not in json.dumps(report)  # the mark's text is the class's, not in the report


def test_a_job_that_failed_otherwise_has_no_report(any_env: ApiEnv) -> None:
    env = any_env
    with env.client() as client:
        job = client.submit(pdfs.links())
    claim = env.claim(job.id)
    env.store.fail(job.id, claim.attempt, "test-worker", "validation_failed", "x", retryable=False)
    assert env.service.describe(env.store.get(job.id)).failed_validation is None
    assert json.loads(_inspect(env, job.id, "--json").stdout)["validation"] is None
    with env.client() as client:
        assert client.get(job.id).raw["validation"] is None
