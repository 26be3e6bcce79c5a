"""The request's period is the report's period: a job whose data says 2026-01 and whose request says
2026-02 renders a PDF titled and headed 2026-02 (read back by poppler's pdftotext and pdfinfo). The schema
still judges the data as sent; a snapshot without a period (queued before the rule) renders the data."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from docfence.core.errors import TemplateError
from docfence.core.policy import JobPolicy, Kind, WatermarkSpec
from docfence.engines.report.bundle import TemplateBundle
from docfence.engines.report.render import template_hash
from docfence.reports.templates import encode_assets
from docfence.samples.monthly_report import load_monthly_bundle, sample_monthly_data
from docfence.sandbox.report_job import build_snapshot, read_snapshot, render_report_job

PLAIN = JobPolicy(kind=Kind.REPORT, watermark=None)
MARKED = JobPolicy(kind=Kind.REPORT, watermark=WatermarkSpec(text="SYNTHETIC REPORT"))


def snapshot(bundle: TemplateBundle, data: dict[str, Any], period: str | None,
             variant: str | None = None) -> bytes:
    return build_snapshot(name=bundle.name, html=bundle.html, css=bundle.css, schema=bundle.schema,
                          assets_b64=encode_assets(bundle), sha256=template_hash(bundle),
                          data=data, period=period, variant=variant)


def poppler(tmp_path: Path, pdf: bytes, *argv: str) -> str:
    path = tmp_path / "report.pdf"
    path.write_bytes(pdf)
    done = subprocess.run([*argv, str(path), *(["-"] if argv[0] == "pdftotext" else [])],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def january() -> dict[str, Any]:
    data = sample_monthly_data(pages=1)
    assert data["period"] == "2026-01"
    return data


@pytest.mark.parametrize("policy", [PLAIN, MARKED], ids=["unwatermarked", "watermarked"])
def test_the_requests_period_wins_over_the_datas(policy: JobPolicy, tmp_path: Path) -> None:
    result = render_report_job(snapshot(load_monthly_bundle(), january(), "2026-02"), policy)
    text = poppler(tmp_path, result.output, "pdftotext")
    assert "Monthly activity report - 2026-02" in text and "report - 2026-01" not in text
    assert result.validation["report"]["period"] == "2026-02"
    if policy.watermark is None:  # the watermarked default class strips /Info (hidden data)
        info = poppler(tmp_path, result.output, "pdfinfo")
        assert "activity 2026-02" in info and "activity 2026-01" not in info


def test_a_variant_report_carries_the_requests_period_in_its_title(tmp_path: Path) -> None:
    result = render_report_job(snapshot(load_monthly_bundle(), january(), "2026-02", variant="pdf/ua-1"),
                               MARKED)
    meta = poppler(tmp_path, result.output, "pdfinfo", "-meta")
    assert "activity 2026-02" in meta and "2026-01" not in meta


def test_a_snapshot_without_a_period_renders_the_data_as_it_is(tmp_path: Path) -> None:
    result = render_report_job(snapshot(load_monthly_bundle(), january(), None), PLAIN)
    assert "Monthly activity report - 2026-01" in poppler(tmp_path, result.output, "pdftotext")
    assert result.validation["report"]["period"] is None


def test_the_schema_judges_the_data_as_sent(tmp_path: Path) -> None:
    """A schema that forbids a `period` key of the data still lets the template print the request's."""
    schema = {"type": "object", "additionalProperties": False, "properties": {"clinic": {"type": "string"}}}
    bundle = TemplateBundle(name="t", html="<p>{{ clinic }} for {{ period }}</p>", css="", schema=schema)
    result = render_report_job(snapshot(bundle, {"clinic": "North"}, "2026-Q1"), PLAIN)
    assert "North for 2026-Q1" in poppler(tmp_path, result.output, "pdftotext")


def test_the_period_round_trips_and_a_malformed_one_is_refused() -> None:
    bundle = load_monthly_bundle()
    assert read_snapshot(snapshot(bundle, january(), "2026-02")).period == "2026-02"
    doc = json.loads(snapshot(bundle, january(), "2026-02"))
    doc["period"] = {"month": 2}
    with pytest.raises(TemplateError, match="period"):
        read_snapshot(json.dumps(doc).encode())
