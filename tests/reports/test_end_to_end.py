"""The report pipeline through the real worker path: a monthly report of synthetic data is requested,
rendered in the render child, watermarked, validated and committed; bad data fails its job with a coded
error."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pypdfium2
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
                        limits=LONG_BUDGET_LIMITS)  # no render budget runs out under load
    rt = Runtime.open(settings)
    try:
        yield rt
    finally:
        rt.close()


def test_monthly_report_renders_watermarks_validates_and_archives(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    info, _ = Templates(runtime.store).create_version("monthly", load_monthly_bundle(), actor="test")
    requests = ReportRequests(runtime.settings, runtime.store, runtime.regions)
    good, _ = requests.create(RequestSpec(tenant="acme", subject="clinic-1", period="2026-01",
                                          template=info.ref, data=sample_monthly_data(pages=2)), actor="test")
    # Requests are checked against the schema when made; a job queued before that check existed (an
    # upgrade) still meets the renderer's own check, which is what this part exercises.
    monkeypatch.setattr("docfence.reports.requests._check_data", lambda template, data: None)
    bad, _ = requests.create(RequestSpec(tenant="acme", subject="clinic-2", period="2026-01",
                                         template=info.ref, data={"clinic": "x"}), actor="test")
    monkeypatch.undo()
    counters = run_worker(runtime, until_idle=True, install_signals=False)
    assert counters.succeeded == 1 and counters.failed == 1

    job = runtime.store.get(good.jobs[0].id)
    assert job.state is JobState.SUCCEEDED
    artifact = runtime.store.artifact(job.id)
    assert artifact is not None and artifact.pages == 2
    assert artifact.validation["ok"] is True and artifact.validation["mode"] == "vector"
    assert artifact.validation["report"]["template_sha256"] == info.sha256
    key = requests.keys.key_for(RowKey.of(job))  # the worker sealed it under the job's data key
    assert key is not None
    data = read_object(runtime.regions.for_region(job.region), artifact.key, key,
                       expected_sha256=artifact.sha256)
    assert hashlib.sha256(data).hexdigest() == artifact.sha256
    checks = {c["name"]: c for c in artifact.validation["checks"]}
    assert checks["watermark_structure"]["pages_marked"] == 2 and checks["watermark_rendered"]["ok"]
    pdf = pypdfium2.PdfDocument(data)
    try:
        assert len(pdf) == 2 and "Synthetic Demo Clinic" in pdf[0].get_textpage().get_text_range()
    finally:
        pdf.close()

    failed = runtime.store.get(bad.jobs[0].id)
    assert failed.state is JobState.FAILED and failed.last_error_code == "template_data_invalid"
    assert "$" in (failed.last_error_message or "")  # paths and rules, never values
    assert requests.get(good.request.id).state == "succeeded"
