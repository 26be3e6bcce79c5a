"""Through the request use case and the real worker: a PDF/UA-1 report requested for 2026-02 with data
that says 2026-01, in the default (watermarked, hidden-data-stripping) class, is published titled and
headed 2026-02 and still identified as PDF/UA-1 (read back by poppler)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from docfence.blobs.kek.jobs import RowKey, read_object
from docfence.config import DocumentClass, Settings, WorkerConfig
from docfence.core.policy import WatermarkSpec
from docfence.core.states import JobState
from docfence.reports import ReportRequests, RequestSpec, Templates
from docfence.samples.monthly_report import load_monthly_bundle, sample_monthly_data
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.wiring import Runtime, run_worker


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    cls = DocumentClass("default", deadline_s=300.0, watermark=WatermarkSpec(text="SYNTHETIC"))
    settings = Settings(database_url=f"sqlite:///{tmp_path}/docfence.db", storage_url=f"file:{tmp_path}/obj",
                        classes={"default": cls},
                        worker=WorkerConfig(reconcile_in_process=False, poll_interval_s=0.05),
                        limits=LONG_BUDGET_LIMITS)
    rt = Runtime.open(settings)
    try:
        yield rt
    finally:
        rt.close()


def poppler(tmp_path: Path, pdf: bytes, *argv: str) -> str:
    path = tmp_path / "report.pdf"
    path.write_bytes(pdf)
    extra = ["-"] if argv[0] == "pdftotext" else []
    done = subprocess.run([*argv, str(path), *extra], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_published_report_has_the_requests_period_and_its_variant(runtime: Runtime, tmp_path: Path) -> None:
    info, _ = Templates(runtime.store).create_version("monthly", load_monthly_bundle(), actor="test")
    data = sample_monthly_data(pages=1)
    assert data["period"] == "2026-01"
    requests = ReportRequests(runtime.settings, runtime.store, runtime.regions)
    detail, _ = requests.create(
        RequestSpec(tenant="acme", subject="clinic-1", period="2026-02", template=info.ref, data=data,
                    variant="pdf/ua-1"), actor="test")
    assert run_worker(runtime, until_idle=True, install_signals=False).succeeded == 1
    job = runtime.store.get(detail.jobs[0].id)
    artifact = runtime.store.artifact(job.id)
    assert job.state is JobState.SUCCEEDED and artifact is not None
    pdf = read_object(runtime.regions.for_region(job.region), artifact.key,
                      requests.keys.key_for(RowKey.of(job)), expected_sha256=artifact.sha256)
    text = poppler(tmp_path, pdf, "pdftotext")
    assert "Monthly activity report - 2026-02" in text and "report - 2026-01" not in text
    meta = poppler(tmp_path, pdf, "pdfinfo", "-meta")
    assert 'pdfuaid:part="1"' in meta and "activity 2026-02" in meta
    checks = {c["name"]: c for c in artifact.validation["checks"]}
    assert checks["variant"]["ok"] and artifact.validation["report"]["period"] == "2026-02"
