"""The report job's engine entry point: the snapshot's template hash is verified, sandbox violations and
bad data fail with stable codes, and an unwatermarked PDF/A report still opens with its pages."""

from __future__ import annotations

import json

import pytest

from docfence.core.errors import TemplateDataInvalid, TemplateError
from docfence.core.policy import JobPolicy, Kind
from docfence.engines.report.bundle import TemplateBundle
from docfence.engines.report.render import template_hash
from docfence.reports.templates import encode_assets
from docfence.sandbox.report_job import build_snapshot, render_report_job

SCHEMA = {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}


def snapshot(html: str, data: dict[str, object], variant: str | None = None, sha: str | None = None) -> bytes:
    bundle = TemplateBundle(name="t", html=html, css="", schema=SCHEMA)
    return build_snapshot(name="t", html=html, css="", assets_b64=encode_assets(bundle), schema=SCHEMA,
                          sha256=sha or template_hash(bundle), data=data, variant=variant)


POLICY = JobPolicy(kind=Kind.REPORT, watermark=None)


def test_unwatermarked_pdfa_report_opens_with_its_pages() -> None:
    result = render_report_job(snapshot("<h1>{{ title }}</h1>", {"title": "Hello"}, "pdf/a-3b"), POLICY)
    assert result.pages == 1 and result.output.startswith(b"%PDF-") and result.validation["ok"]
    assert result.validation["report"]["variant"] == "pdf/a-3b"


def test_tampered_template_is_refused() -> None:
    with pytest.raises(TemplateError, match="sha256"):
        render_report_job(snapshot("<h1>x</h1>", {"title": "a"}, sha="0" * 64), POLICY)
    with pytest.raises(TemplateError):
        render_report_job(b"not json", POLICY)
    doc = json.loads(snapshot("<h1>x</h1>", {"title": "a"}))
    doc["template"]["html"] = "<h1>changed</h1>"
    with pytest.raises(TemplateError):
        render_report_job(json.dumps(doc).encode(), POLICY)


def test_sandbox_and_schema_errors_are_coded() -> None:
    with pytest.raises(TemplateError) as exc:
        render_report_job(snapshot("{{ title.__class__.__mro__ }}", {"title": "a"}), POLICY)
    assert exc.value.code == "template_error"
    with pytest.raises(TemplateDataInvalid) as bad:
        render_report_job(snapshot("<p>{{ title }}</p>", {"title": 5}), POLICY)
    assert bad.value.code == "template_data_invalid" and "5" not in bad.value.message
