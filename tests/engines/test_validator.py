"""The validator catches broken outputs: a watermark missing from one page, a dropped link, a changed
page box; a failed check raises ValidationFailed carrying the report."""

from __future__ import annotations

import io
import json

import pikepdf
import pytest

from docfence.core.errors import ValidationFailed
from docfence.core.policy import JobPolicy, WatermarkSpec
from docfence.engines import watermark_document
from docfence.engines.validate import require_valid, validate
from docfence.samples import pdfs

SPEC = WatermarkSpec()


def _mutate(data: bytes, change: object) -> bytes:
    pdf = pikepdf.open(io.BytesIO(data))
    change(pdf)  # type: ignore[operator]
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def _failed(report: dict[str, object]) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["ok"]}  # type: ignore[attr-defined, index]


@pytest.fixture(scope="module")
def links_pair() -> tuple[bytes, bytes]:
    data = pdfs.links()
    return data, watermark_document(data, JobPolicy(watermark=SPEC)).output


def test_good_output_passes_and_report_is_json(links_pair: tuple[bytes, bytes]) -> None:
    report = validate(*links_pair, SPEC, mode="vector")
    assert report["ok"], report
    json.dumps(report)
    assert {c["name"] for c in report["checks"]} >= {
        "page_count",
        "page_geometry",
        "annotations_and_links",
        "fonts",
        "watermark_structure",
        "text_preserved",
        "watermark_rendered",
        "second_reader",
    }


def test_catches_watermark_missing_from_one_page(links_pair: tuple[bytes, bytes]) -> None:
    def strip_second(pdf: pikepdf.Pdf) -> None:
        page = pdf.pages[1].obj
        page.Contents = pikepdf.Array(list(page.Contents)[1:-1])

    broken = _mutate(links_pair[1], strip_second)
    report = validate(links_pair[0], broken, SPEC, mode="vector")
    assert not report["ok"]
    assert {"watermark_structure", "watermark_rendered"} <= _failed(report)
    with pytest.raises(ValidationFailed) as info:
        require_valid(report)
    assert info.value.report is report  # type: ignore[attr-defined]


def test_catches_dropped_link(links_pair: tuple[bytes, bytes]) -> None:
    def drop_link(pdf: pikepdf.Pdf) -> None:
        annots = pdf.pages[0].obj.Annots
        del annots[0]

    report = validate(links_pair[0], _mutate(links_pair[1], drop_link), SPEC, mode="vector")
    assert "annotations_and_links" in _failed(report)


def test_catches_changed_link_target(links_pair: tuple[bytes, bytes]) -> None:
    def retarget(pdf: pikepdf.Pdf) -> None:
        pdf.pages[0].obj.Annots[0].A.URI = pikepdf.String("https://evil.example")

    report = validate(links_pair[0], _mutate(links_pair[1], retarget), SPEC, mode="vector")
    assert "annotations_and_links" in _failed(report)


def test_catches_changed_page_box(links_pair: tuple[bytes, bytes]) -> None:
    def shrink(pdf: pikepdf.Pdf) -> None:
        pdf.pages[0].obj.CropBox = pikepdf.Array([10, 10, 500, 700])

    report = validate(links_pair[0], _mutate(links_pair[1], shrink), SPEC, mode="vector")
    assert "page_geometry" in _failed(report)


def test_catches_changed_text_and_watermark_on_unselected_page() -> None:
    data = pdfs.many_pages(3)
    spec = WatermarkSpec(pages="1")
    all_marked = watermark_document(data, JobPolicy(watermark=WatermarkSpec())).output
    report = validate(data, all_marked, spec, mode="vector")
    assert {"watermark_structure", "watermark_rendered"} <= _failed(report)


def test_catches_dropped_page() -> None:
    data = pdfs.many_pages(3)
    output = watermark_document(data, JobPolicy()).output

    def drop(pdf: pikepdf.Pdf) -> None:
        del pdf.pages[2]

    report = validate(data, _mutate(output, drop), SPEC, mode="vector")
    assert _failed(report) == {"page_count"}


def test_catches_internal_link_pointing_at_another_page(links_pair: tuple[bytes, bytes]) -> None:
    def retarget(pdf: pikepdf.Pdf) -> None:
        pdf.pages[0].obj.Annots[1].A.D[0] = pdf.pages[0].obj

    report = validate(links_pair[0], _mutate(links_pair[1], retarget), SPEC, mode="vector")
    assert "annotations_and_links" in _failed(report)


def test_unreadable_output_fails_validation(links_pair: tuple[bytes, bytes]) -> None:
    report = validate(links_pair[0], b"%PDF-1.7\ngarbage", SPEC, mode="vector")
    assert not report["ok"] and _failed(report) == {"output_opens"}


def test_validation_level_is_a_per_class_setting(tmp_path: object) -> None:
    """`validation = "exhaustive"` on a document class reaches the job's frozen policy and the report;
    an unknown level fails at start-up, naming the setting."""
    from pathlib import Path

    from docfence import config
    from docfence.core.errors import ConfigError

    folder = Path(str(tmp_path))
    path = folder / "docfence.toml"
    path.write_text('[classes.audit]\nvalidation = "exhaustive"\n[classes.preview]\nmode = "vector"\n')
    settings = config.load_settings(env={"DOCFENCE_CONFIG": str(path)})
    audit, preview = settings.policy_for("audit"), settings.policy_for("preview")
    assert (audit.validation, preview.validation) == ("exhaustive", "standard")
    result = watermark_document(pdfs.many_pages(2), audit)
    assert result.validation["level"] == "exhaustive"
    assert next(c for c in result.validation["checks"] if c["name"] == "text_extracted")["pages"] == "1-2"
    path.write_text('[classes.audit]\nvalidation = "thorough"\n')
    with pytest.raises(ConfigError, match="validation"):
        config.load_settings(env={"DOCFENCE_CONFIG": str(path)})
