"""Raster mode on a file of ../shared/corpus-wide it once refused, and the class's pixel limit: a page the
render memory cannot hold at the class's DPI is refused up front as `over_limits`, in a small process,
instead of failing at the memory limit after seconds of drawing."""

from __future__ import annotations

import io
from pathlib import Path

import pikepdf
import pytest

from docfence.core.errors import OverLimits
from docfence.core.policy import JobPolicy, Limits, Mode, WatermarkSpec
from docfence.engines import watermark_document
from docfence.engines.marks import MarkSet
from docfence.engines.validate import validate
from docfence.testing.corpus_judge import LIMIT_MB, run_one

from .helpers import CORPUS

WIDE = CORPUS.parent / "corpus-wide"
POLICY = JobPolicy(mode=Mode.RASTER, watermark=WatermarkSpec(text="CONFIDENTIAL"))


def _square_page(side_pt: float) -> bytes:
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(side_pt, side_pt))
    pdf.pages[0].Contents = pdf.make_stream(b"0 0 1 rg 10 10 100 100 re f")
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def test_a_page_the_render_memory_cannot_hold_is_refused_by_the_limit_before_drawing(tmp_path: Path) -> None:
    """A 7800-pt page is 264 Mpx at 150 DPI (2 GB held at 8 bytes a pixel): the CLI's sandbox used to
    draw it until its 1 GB memory limit stopped it (render_resource_exceeded, ~1 GB resident)."""
    source = tmp_path / "huge.pdf"
    source.write_bytes(_square_page(7800))
    answer = run_one(source, "raster", tmp_path / "out")
    assert answer.entry["code"] == "over_limits", answer.entry
    assert "264 million pixels at 150 DPI" in answer.entry["message"]
    assert answer.peak_mb < LIMIT_MB, answer.peak_mb


def test_the_pixel_limit_follows_the_class_render_memory() -> None:
    """The same 1200-pt page (6.25 Mpx at 150 DPI, 50 MB held) passes the default limit and is refused
    by a class whose render memory is 32 MB."""
    data = _square_page(1200)
    assert watermark_document(data, POLICY).pages == 1
    small = JobPolicy(mode=Mode.RASTER, watermark=POLICY.watermark, limits=Limits(render_memory_mb=32))
    with pytest.raises(OverLimits, match="32 MB"):
        watermark_document(data, small)


@pytest.mark.skipif(not (WIDE / "pdfcpu__read.go.pdf").is_file(), reason="../shared/corpus-wide is absent")
def test_a_dark_code_listing_validates_and_its_page_without_the_mark_still_fails() -> None:
    """pdfcpu__read.go.pdf (45 pages of light code on a dark background): the sample's output side was
    pdfium's own downscale of the page image, set against an area-averaged input render; on fine light
    text that differed by ~6 levels everywhere and ate the mark's visibility margin
    (watermark_rendered). Both sides are now drawn at the same scale and reduced alike. The output
    with the first page's image swapped for an unmarked one must still fail that check."""
    data = (WIDE / "pdfcpu__read.go.pdf").read_bytes()
    result = watermark_document(data, POLICY)
    assert result.pages == 45
    bare = watermark_document(data, JobPolicy(mode=Mode.RASTER,
                                              watermark=WatermarkSpec(text="CONFIDENTIAL", pages="2")))
    planted = _first_page_from(result.output, bare.output)
    report = validate(data, planted, MarkSet.of(POLICY), mode="raster", dpi=POLICY.dpi)
    failed = {c["name"] for c in report["checks"] if not c["ok"]}
    assert "watermark_rendered" in failed, report


def _first_page_from(marked: bytes, unmarked: bytes) -> bytes:
    """`marked` with its first page's image replaced by `unmarked`'s (a page left without its mark)."""
    out, other = pikepdf.open(io.BytesIO(marked)), pikepdf.open(io.BytesIO(unmarked))
    image = other.pages[0].Resources.XObject.DfIm
    out.pages[0].Resources.XObject.DfIm = out.copy_foreign(image)
    buf = io.BytesIO()
    out.save(buf)
    return buf.getvalue()
