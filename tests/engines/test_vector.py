"""Vector watermarking of synthetic fixtures: every output passes qpdf --check, the validator and a
second reader's render; geometry, links, forms, text and encryption survive; the mark is upright."""

from __future__ import annotations

import io
from pathlib import Path

import pikepdf
import pypdfium2 as pdfium
import pytest
from PIL import ImageChops

from docfence.core.policy import JobPolicy, WatermarkSpec
from docfence.engines import watermark_document
from docfence.samples import pdfs

from .helpers import CORPUS, UNICODE_MARK, poppler_renders, qpdf_check

POSITIONS = ("diagonal", "center", "header", "footer", "tiled")


@pytest.mark.parametrize("name", ["rotated", "offset_boxes", "links", "form", "unicode", "mixed_sizes"])
@pytest.mark.parametrize("position", POSITIONS)
def test_samples_validate_and_render_in_second_reader(
    sample_docs: dict[str, bytes], name: str, position: str, tmp_path: Path
) -> None:
    policy = JobPolicy(watermark=WatermarkSpec(text=UNICODE_MARK, position=position))
    result = watermark_document(sample_docs[name], policy)
    assert result.validation["ok"], result.validation
    assert result.mode == "vector"
    qpdf_check(result.output, tmp_path)
    poppler_renders(result.output, tmp_path, result.pages)


def test_200_pages_odd_selection_underlay(pages_200: bytes, tmp_path: Path) -> None:
    spec = WatermarkSpec(text="CONFIDENTIAL", pages="odd", layer="underlay", opacity=0.5)
    result = watermark_document(pages_200, JobPolicy(watermark=spec))
    assert result.pages == 200 and result.validation["ok"]
    qpdf_check(result.output, tmp_path)
    # one shared Form XObject for all 100 marked pages, so the output grows by a few KB only
    assert len(result.output) - len(pages_200) < 25_000


def _top_band_changed(before: bytes, after: bytes) -> list[bool]:
    """Whether the top tenth (as displayed) of each page changed when rendered."""
    out = []
    doc_a, doc_b = pdfium.PdfDocument(before), pdfium.PdfDocument(after)
    for i in range(len(doc_a)):
        img_a = doc_a[i].render(scale=0.3).to_pil()
        img_b = doc_b[i].render(scale=0.3).to_pil()
        band = (0, 0, img_a.size[0], img_a.size[1] // 10)
        out.append(ImageChops.difference(img_a.crop(band), img_b.crop(band)).getbbox() is not None)
    return out


def test_header_is_at_the_displayed_top_on_every_rotation() -> None:
    data = pdfs.rotated_pages()
    result = watermark_document(data, JobPolicy(watermark=WatermarkSpec(text="HEADER", position="header")))
    assert all(_top_band_changed(data, result.output))
    footer = watermark_document(data, JobPolicy(watermark=WatermarkSpec(text="FOOTER", position="footer")))
    assert not any(_top_band_changed(data, footer.output))


def test_boxes_rotation_links_and_form_untouched(sample_docs: dict[str, bytes]) -> None:
    for name in ("rotated", "offset_boxes", "links", "form"):
        result = watermark_document(sample_docs[name], JobPolicy())
        src = pikepdf.open(io.BytesIO(sample_docs[name]))
        out = pikepdf.open(io.BytesIO(result.output))
        for a, b in zip(src.pages, out.pages, strict=True):
            assert a.mediabox == b.mediabox and a.cropbox == b.cropbox
            assert a.obj.get("/Rotate") == b.obj.get("/Rotate")
            assert len(a.obj.get("/Annots", [])) == len(b.obj.get("/Annots", []))
        if name == "form":
            assert str(out.Root.AcroForm.Fields[0].V) == "REF-0001"


def test_watermark_is_a_marked_artifact_and_not_text(sample_docs: dict[str, bytes]) -> None:
    result = watermark_document(sample_docs["unicode"], JobPolicy(watermark=WatermarkSpec(text=UNICODE_MARK)))
    out = pikepdf.open(io.BytesIO(result.output))
    last = out.pages[0].obj.Contents[-1].read_bytes()
    assert b"/Artifact <</Type /Pagination /Subtype /Watermark>> BDC" in last
    text = pdfium.PdfDocument(result.output)[0].get_textpage().get_text_range()
    assert "患者" not in text and "Müller" in text  # page text only (the mark is outlines)
    assert "/Font" not in str(out.pages[0].obj.Resources.XObject.keys())


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus ../shared/corpus is absent")
def test_encryption_kept_and_pdfa_claim_withdrawn() -> None:
    enc = (CORPUS / "pdfium__encrypted.pdf").read_bytes()
    result = watermark_document(enc, JobPolicy(), password="1234")
    out = pikepdf.open(io.BytesIO(result.output), password="1234")
    src = pikepdf.open(io.BytesIO(enc), password="1234")
    assert out.is_encrypted and out.allow == src.allow
    pdfa = watermark_document((CORPUS / "pdfjs__bug2025674.pdf").read_bytes(), JobPolicy())
    meta = pikepdf.open(io.BytesIO(pdfa.output)).open_metadata()
    assert "pdfaid:part" not in meta
    assert "/StructTreeRoot" in pikepdf.open(io.BytesIO(pdfa.output)).Root


def test_stale_linearization_dropped() -> None:
    if not CORPUS.is_dir():
        pytest.skip("shared corpus ../shared/corpus is absent")
    result = watermark_document((CORPUS / "pdfcpu__bookletTest.pdf").read_bytes(), JobPolicy())
    assert not pikepdf.open(io.BytesIO(result.output)).is_linearized


def test_a_resource_name_that_is_not_utf8_is_kept(tmp_path: Path) -> None:
    """A form XObject named `/Fm\\xb0` (legal in PDF: a name is bytes) used to crash the mark's resource
    copy with std::bad_cast (found by bench/fuzz.py); the page is marked and the name kept."""
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(612, 792))
    form = pikepdf.Stream(pdf, b"0 0 1 rg 10 10 50 50 re f")
    form.Type, form.Subtype, form.BBox = pikepdf.Name.XObject, pikepdf.Name.Form, [0, 0, 612, 792]
    page = pdf.pages[0]
    page.obj.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(FmZ=form))
    page.obj.Contents = pdf.make_stream(b"q /FmZ Do Q")
    buf = io.BytesIO()
    pdf.save(buf, compress_streams=False, object_stream_mode=pikepdf.ObjectStreamMode.disable)
    data = buf.getvalue()
    assert data.count(b"/FmZ") == 2
    data = data.replace(b"/FmZ", b"/Fm\xb0")  # same length: the xref offsets stay right

    result = watermark_document(data, JobPolicy(watermark=WatermarkSpec()))

    assert result.validation["ok"]
    out = pikepdf.open(io.BytesIO(result.output))
    assert b"/Fm#b0" in out.pages[0].obj.Resources.XObject.unparse()  # the same name, escaped
