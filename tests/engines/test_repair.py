"""Repair where the readers agree: box damage, leading junk and xref damage are repaired, noted and
validated in both modes; truncation stays refused."""

from __future__ import annotations

import io
import re

import pikepdf
import pytest

from docfence.core.errors import MalformedPdf
from docfence.core.policy import JobPolicy, Mode
from docfence.engines import watermark_document
from docfence.samples import pdfs


def _edit(change: object) -> bytes:
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(3)))
    change(pdf)  # type: ignore[operator]
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def _no_media_box(pdf: pikepdf.Pdf) -> None:
    for page in pdf.pages:
        if "/MediaBox" in page.obj:
            del page.obj["/MediaBox"]
    if "/MediaBox" in pdf.Root.Pages:
        del pdf.Root.Pages["/MediaBox"]


def _crop_outside(pdf: pikepdf.Pdf) -> None:
    pdf.pages[0].obj.CropBox = pikepdf.Array([5000, 5000, 6000, 6000])  # no overlap at all
    pdf.pages[1].obj.CropBox = pikepdf.Array([-50, -50, 300, 300])  # partly outside


@pytest.mark.parametrize("mode", [Mode.VECTOR, Mode.RASTER])
@pytest.mark.parametrize(
    ("damage", "note"),
    [(_no_media_box, "no usable MediaBox"), (_crop_outside, "CropBox")],
    ids=["missing-mediabox", "crop-outside-media"],
)
def test_box_damage_is_repaired_and_noted(damage: object, note: str, mode: Mode) -> None:
    result = watermark_document(_edit(damage), JobPolicy(mode=mode))
    assert result.validation["ok"] and result.pages == 3
    assert any(note in n for n in result.validation["notes"]), result.validation["notes"]
    out = pikepdf.open(io.BytesIO(result.output))
    if damage is _crop_outside and mode is Mode.VECTOR:
        assert [float(v) for v in out.pages[1].obj.CropBox] == [0, 0, 300, 300]
    if damage is _no_media_box and mode is Mode.VECTOR:
        assert [float(v) for v in out.pages[0].mediabox] == [0, 0, 612, 792]


def test_leading_junk_is_repaired_and_noted() -> None:
    result = watermark_document(b"garbage from a mail gateway\r\n" + pdfs.many_pages(2), JobPolicy())
    assert any("before the %PDF header" in n for n in result.validation["notes"])


def test_xref_damage_is_reconstructed_and_noted() -> None:
    data = pdfs.many_pages(3)
    start = re.search(rb"startxref\s+(\d+)", data)
    assert start is not None
    broken = data[: start.start(1)] + str(int(start.group(1)) + 7).encode() + data[start.end(1) :]
    result = watermark_document(broken, JobPolicy())
    assert result.pages == 3
    assert any("cross-reference" in n for n in result.validation["notes"])


def test_truncation_stays_refused() -> None:
    data = pdfs.many_pages(5)
    with pytest.raises(MalformedPdf):
        watermark_document(data[: len(data) * 2 // 3], JobPolicy())


def test_trailer_without_size_is_repaired_into_a_clean_file() -> None:
    data = pdfs.many_pages(2)
    broken = data.replace(b"/Size", b"/Sjze")
    assert broken != data
    result = watermark_document(broken, JobPolicy())
    assert result.validation["ok"] and b"/Size" in result.output
