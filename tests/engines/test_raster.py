"""Raster mode: pages rebuilt as images at the same visible size and orientation, watermark burned in,
encoding chosen by content (text pages at least 2x smaller than naive RGB JPEG q85)."""

from __future__ import annotations

import io
from pathlib import Path

import pikepdf
import pypdfium2 as pdfium
import pytest

from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import watermark_document
from docfence.engines.raster import naive_jpeg_size
from docfence.samples import pdfs

from .helpers import UNICODE_MARK, poppler_renders, qpdf_check


@pytest.mark.parametrize("name", ["rotated", "offset_boxes", "links", "form", "mixed_sizes"])
def test_samples_raster_validate(sample_docs: dict[str, bytes], name: str, tmp_path: Path) -> None:
    policy = JobPolicy(mode=Mode.RASTER, dpi=100, watermark=WatermarkSpec(text=UNICODE_MARK))
    result = watermark_document(sample_docs[name], policy)
    assert result.validation["ok"] and result.mode == "raster"
    assert any("intentionally" in note for note in result.validation["notes"])
    qpdf_check(result.output, tmp_path)
    poppler_renders(result.output, tmp_path, result.pages)
    out = pikepdf.open(io.BytesIO(result.output))
    assert all("/Annots" not in p.obj and "/Font" not in p.obj.Resources for p in out.pages)


def test_text_pages_at_least_twice_smaller_than_naive_jpeg() -> None:
    data = pdfs.many_pages(4)
    result = watermark_document(data, JobPolicy(mode=Mode.RASTER, dpi=150))
    doc = pdfium.PdfDocument(data)
    naive = sum(naive_jpeg_size(doc[i].render(scale=150 / 72).to_pil()) for i in range(4))
    assert len(result.output) * 2 <= naive, (len(result.output), naive)


@pytest.mark.parametrize("encoding", ["jpeg", "png", "gray"])
def test_explicit_encodings_validate(encoding: str) -> None:
    policy = JobPolicy(mode=Mode.RASTER, dpi=72, raster_encoding=encoding)
    assert watermark_document(pdfs.mixed_sizes(), policy).validation["ok"]


def test_selected_pages_only() -> None:
    policy = JobPolicy(mode=Mode.RASTER, dpi=72, watermark=WatermarkSpec(pages="2"))
    assert watermark_document(pdfs.many_pages(3), policy).validation["ok"]
