"""A report job's input format (a frozen JSON snapshot: template version + data + variant + the request's
period) and its render: verify the template hash, render (the request's period is the template's `period`),
then watermark and validate like any PDF, a declared variant's identification proved in the validation
report. It lives in the sandbox, not in reports/ (which builds snapshots): render processes read it, and
reports/ sits above the sandbox."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from docfence.core.errors import TemplateDataInvalid, TemplateError, ValidationFailed
from docfence.core.policy import JobPolicy, Kind
from docfence.engines import ProcessResult, watermark_document
from docfence.engines.checks import failure_message
from docfence.engines.report.render import VARIANTS, TemplateBundle, render_report, template_hash
from docfence.engines.variant_proof import prove_variant

SNAPSHOT_FORMAT = "docfence.report-input.v1"


def build_snapshot(
    *, name: str, html: str, css: str, assets_b64: dict[str, str], schema: dict[str, Any], sha256: str,
    data: dict[str, Any], variant: str | None, period: str | None = None,
) -> bytes:
    """The canonical JSON input of a report job (what `render_report_job` reads). `period`: the
    request's period key, which the template sees as `period` (a snapshot without one renders the data
    as it is)."""
    doc = {
        "format": SNAPSHOT_FORMAT,
        "template": {"name": name, "html": html, "css": css, "assets": assets_b64, "schema": schema,
                     "sha256": sha256},
        "data": data,
        "variant": variant,
        **({"period": period} if period is not None else {}),
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class ReportInput:
    """A parsed snapshot: the verified template, the data as requested, the variant and the period."""

    bundle: TemplateBundle
    data: dict[str, Any]
    variant: str | None
    period: str | None


def read_snapshot(data: bytes) -> ReportInput:
    """A snapshot's parts. Raises TemplateError when it is malformed or the template does not hash to
    its recorded sha256; TemplateDataInvalid when the data is not a JSON object."""
    try:
        doc = json.loads(data)
        tpl = doc["template"]
        assets = {str(k): base64.b64decode(v, validate=True) for k, v in dict(tpl["assets"]).items()}
        bundle = TemplateBundle(name=str(tpl["name"]), html=str(tpl["html"]), css=str(tpl["css"]),
                                assets=assets, schema=dict(tpl["schema"]))
        expected, report_data, variant = str(tpl["sha256"]), doc["data"], doc.get("variant")
        period = doc.get("period")
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise TemplateError("the report job's input is not a valid report snapshot") from exc
    if not isinstance(report_data, dict):
        raise TemplateDataInvalid("report data must be a JSON object")
    if variant not in VARIANTS:
        raise TemplateError("the report snapshot names an unknown PDF variant")
    if period is not None and not isinstance(period, str):
        raise TemplateError("the report snapshot's period is not a period key")
    if template_hash(bundle) != expected:
        raise TemplateError("the template does not match its recorded sha256")
    return ReportInput(bundle, report_data, variant, period)


def parse_snapshot(data: bytes) -> tuple[TemplateBundle, dict[str, Any], str | None]:
    """(bundle, data, variant) of a snapshot (`read_snapshot`, without the period)."""
    parsed = read_snapshot(data)
    return parsed.bundle, parsed.data, parsed.variant


def render_report_job(data: bytes, policy: JobPolicy) -> ProcessResult:
    """Render one report job. With `policy.watermark` the rendered PDF goes through
    `engines.watermark_document` (watermark + fidelity validation); without, it is checked to open with
    pages. Raises TemplateError, TemplateDataInvalid, RenderResourceExceeded or ValidationFailed (all
    coded, all permanent). A declared variant's identification is proved (the "variant" check) either way."""
    job = read_snapshot(data)
    variant = job.variant
    rendered = render_report(job.bundle, job.data, variant=variant, max_pages=policy.limits.max_pages,
                             period=job.period)
    summary = {"template_sha256": rendered.template_sha256, "variant": variant, "period": job.period,
               "rendered_pages": rendered.pages, "refused_urls": len(rendered.refused_urls)}
    if policy.watermark is not None:
        result = watermark_document(rendered.pdf, policy.evolve(kind=Kind.WATERMARK), variant=variant)
        return ProcessResult(result.output, result.pages, {**result.validation, "report": summary},
                             result.mode)
    pages = _page_count(rendered.pdf)
    if pages != rendered.pages or pages < 1:
        raise ValidationFailed("the rendered report does not reopen with its pages")
    checks = opens_checks(pages) + ([prove_variant(rendered.pdf, variant)] if variant else [])
    validation = {"ok": all(c["ok"] for c in checks), "mode": "report", "pages": pages, "checks": checks,
                  "report": summary}
    if not validation["ok"]:
        raise ValidationFailed(failure_message(validation), report=validation)
    return ProcessResult(rendered.pdf, pages, validation, "report")


def opens_checks(pages: int) -> list[dict[str, Any]]:
    """The minimal contract of an unwatermarked report, in the validator's check format."""
    return [{"name": "opens", "ok": True, "failures": [], "reader": "pdfium"},
            {"name": "page_count", "ok": True, "failures": [], "output": pages}]


def _page_count(pdf: bytes) -> int:
    import pypdfium2

    try:
        doc = pypdfium2.PdfDocument(pdf)
    except pypdfium2.PdfiumError as exc:
        raise ValidationFailed("the rendered report does not open") from exc
    try:
        return len(doc)
    finally:
        doc.close()
