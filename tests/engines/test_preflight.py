"""Preflight refuses what cannot be processed faithfully with stable codes, fast, and without leaking
document content into messages."""

from __future__ import annotations

import io
import zlib

import pikepdf
import pytest

from docfence.core.errors import (
    CorruptContent,
    DocumentError,
    FormTreeInvalid,
    MalformedPdf,
    NoPages,
    NotAPdf,
    OverLimits,
    PageTreeInvalid,
    PasswordRequired,
    ResourceCycle,
    UnsupportedFeature,
)
from docfence.core.policy import JobPolicy, Limits, Mode, SanitizePolicy
from docfence.engines.preflight import bounded_inflate, preflight
from docfence.samples import pdfs


def _save(pdf: pikepdf.Pdf, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    pdf.save(buf, **kwargs)  # type: ignore[arg-type]
    return buf.getvalue()


def test_not_a_pdf_by_content() -> None:
    with pytest.raises(NotAPdf):
        preflight(b"PK\x03\x04 a zip file", JobPolicy())


def test_bomb_fails_fast_without_inflating_everything() -> None:
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(1)))
    bomb = zlib.compress(b"\0" * 64 * 1024 * 1024, 9)  # 64 MB of zeros in ~64 KB
    stream = pdf.make_stream(b"")
    stream.write(bomb, filter=pikepdf.Name.FlateDecode)
    pdf.pages[0].obj.Resources.XObject = pikepdf.Dictionary(Bomb=stream)
    stream.Type, stream.Subtype = pikepdf.Name.XObject, pikepdf.Name.Form
    stream.BBox = pikepdf.Array([0, 0, 1, 1])
    policy = JobPolicy(limits=Limits(max_stream_bytes=8 * 1024 * 1024))
    with pytest.raises(OverLimits):
        preflight(_save(pdf), policy)


def test_bounded_inflate_never_exceeds_limit() -> None:
    with pytest.raises(OverLimits):
        bounded_inflate(zlib.compress(b"\0" * 10_000_000), 1, 1_000_000)


@pytest.mark.parametrize(
    "limits",
    [
        Limits(max_pages=10),
        Limits(max_input_bytes=1000),
        Limits(max_objects=20),
        Limits(max_page_area_pt2=1000.0),
    ],
)
def test_limits(limits: Limits) -> None:
    with pytest.raises(OverLimits):
        preflight(pdfs.many_pages(20), JobPolicy(limits=limits))


def test_xfa_is_unsupported() -> None:
    pdf = pikepdf.open(io.BytesIO(pdfs.form()))
    pdf.Root.AcroForm.XFA = pdf.make_stream(b"<xdp:xdp/>")
    with pytest.raises(UnsupportedFeature):
        preflight(_save(pdf), JobPolicy(sanitize=SanitizePolicy.keep_all()))


def test_user_password_required() -> None:
    pdf = pikepdf.open(io.BytesIO(pdfs.unicode_text()))
    data = _save(pdf, encryption=pikepdf.Encryption(owner="o-secret", user="u-secret", R=6))
    with pytest.raises(PasswordRequired):
        preflight(data, JobPolicy())
    assert preflight(data, JobPolicy(), password="u-secret").encrypted


def _raw_pdf(objects: list[bytes]) -> bytes:
    """A PDF written by hand (with a correct xref) so that structurally invalid trees can be expressed."""
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Root 1 0 R /Size %d >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_page_tree_loop_is_refused() -> None:
    data = _raw_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [4 0 R 3 0 R] /Count 2 >>",
            b"<< /Type /Pages /Kids [2 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 100 100] >>",
        ]
    )
    with pytest.raises(PageTreeInvalid):
        preflight(data, JobPolicy())


def test_zero_pages_is_refused() -> None:
    data = _raw_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"])
    with pytest.raises(NoPages):
        preflight(data, JobPolicy())


def test_messages_hold_no_document_content() -> None:
    try:
        preflight(b"%PDF-1.4\nSECRET PATIENT NAME\n", JobPolicy())
    except DocumentError as exc:
        assert "SECRET" not in exc.message
        assert exc.code in ("malformed_pdf", "not_a_pdf")
    else:
        pytest.fail("a truncated file must be refused")


def test_truncated_incremental_update_is_refused() -> None:
    base = pdfs.many_pages(10)
    pdf = pikepdf.open(io.BytesIO(base))
    pdf.pages[0].obj.Rotate = 90
    update = io.BytesIO()
    pdf.save(update, compress_streams=False)  # a full rewrite stands in for an appended revision
    truncated = base + update.getvalue()[: len(update.getvalue()) // 2]
    assert len(truncated) - len(base) > 2048
    with pytest.raises(MalformedPdf):
        preflight(truncated, JobPolicy())


_PAGE_WITH_FORMS = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 100 100] /Contents 4 0 R %s >>"


def _content() -> bytes:
    return b"<< /Length 8 >>\nstream\n/X0 Do\n\nendstream"


def test_form_field_shared_between_parents_is_refused_fast() -> None:
    """This exact file (one widget under a named field and an unnamed one) makes pdfium 4 never return
    from FPDF_LoadPage after init_forms; preflight refuses it before any renderer sees it."""
    data = _raw_pdf([
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [5 0 R 6 0 R] >> >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        _PAGE_WITH_FORMS % b"/Annots [7 0 R]",
        b"<< /Length 0 >>\nstream\n\nendstream",
        b"<< /T (a) /Kids [7 0 R] >>",
        b"<< /Kids [7 0 R] /Parent 5 0 R >>",
        b"<< /Type /Annot /Subtype /Widget /FT /Tx /Rect [0 0 10 10] /P 3 0 R /Parent 5 0 R >>",
    ])
    with pytest.raises(FormTreeInvalid):
        preflight(data, JobPolicy())


def test_form_field_cycle_is_refused() -> None:
    data = _raw_pdf([
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [5 0 R] >> >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        _PAGE_WITH_FORMS % b"",
        b"<< /Length 0 >>\nstream\n\nendstream",
        b"<< /T (a) /Kids [6 0 R] >>",
        b"<< /T (b) /Kids [5 0 R] >>",
    ])
    with pytest.raises(FormTreeInvalid):
        preflight(data, JobPolicy())


def _form(resources: bytes) -> bytes:
    return b"<< /Type /XObject /Subtype /Form /BBox [0 0 1 1] /Resources " + resources + \
        b" /Length 8 >>\nstream\n/X0 Do\n\nendstream"


def _form_drawing(resources: bytes, content: bytes) -> bytes:
    return b"<< /Type /XObject /Subtype /Form /BBox [0 0 1 1] /Resources " + resources + \
        b" /Length %d >>\nstream\n%s\nendstream" % (len(content), content)


@pytest.mark.parametrize(
    "objects",
    [
        # a form that draws itself twice: a reader without a cycle check renders 2**depth copies
        [_form_drawing(b"<< /XObject << /X0 5 0 R >> >>", b"/X0 Do /X0 Do")],
        [_form_drawing(b"<< /XObject << /X0 5 0 R /X1 5 0 R >> >>", b"/X0 Do /X1 Do")],
        [b"<< /Type /Pattern /PatternType 1 /PaintType 1 /TilingType 1 /BBox [0 0 1 1] /XStep 1 /YStep 1"
         b" /Resources << /Pattern << /P0 5 0 R >> >> /Length 0 >>\nstream\n\nendstream"],
        # a form and a pattern drawing each other: only cycles of forms are what readers break
        [_form(b"<< /XObject << /X0 6 0 R >> >>"),
         b"<< /Type /XObject /Subtype /Form /BBox [0 0 1 1] /Resources << /Pattern << /P0 7 0 R >> >> "
         b"/Length 0 >>\nstream\n\nendstream",
         b"<< /Type /Pattern /PatternType 1 /PaintType 1 /TilingType 1 /BBox [0 0 1 1] /XStep 1 /YStep 1"
         b" /Resources << /XObject << /X0 5 0 R >> >> /Length 0 >>\nstream\n\nendstream"],
    ],
    ids=["self-twice", "self-under-two-names", "pattern", "form-pattern"],
)
def test_self_drawing_resources_are_refused(objects: list[bytes]) -> None:
    """Forms that draw their own cycle more than once, and cycles through patterns (or Type3 fonts, soft
    masks) stay refused; a cycle of forms each drawing it once is watermarked (test_false_refusals)."""
    kind = b"/Pattern << /P0 5 0 R >>" if b"/Pattern" in objects[0][:30] else b"/XObject << /X0 5 0 R >>"
    data = _raw_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        _PAGE_WITH_FORMS % (b"/Resources << " + kind + b" >>"),
        _content(),
        *objects,
    ])
    with pytest.raises(ResourceCycle):
        preflight(data, JobPolicy())


def _form_chain(levels: int, fan_out: int) -> bytes:
    """Forms 5.. each drawing the next level `fan_out` times (a diamond chain when fan_out > 1)."""
    forms = []
    for level in range(levels):
        nxt = 5 + level + 1
        names = b" ".join(b"/X%d %d 0 R" % (i, nxt) for i in range(fan_out))
        forms.append(_form(b"<< /XObject << " + names + b" >> >>") if level < levels - 1 else _form(b"<< >>"))
    return _raw_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        _PAGE_WITH_FORMS % b"/Resources << /XObject << /X0 5 0 R >> >>",
        _content(),
        *forms,
    ])


def test_excessive_nesting_is_over_limits() -> None:
    with pytest.raises(OverLimits):
        preflight(_form_chain(100, 1), JobPolicy())


def test_shared_forms_are_walked_once() -> None:
    """60 levels drawing the next one twice: 2**60 paths, but each form is checked once."""
    opened = preflight(_form_chain(60, 2), JobPolicy())
    assert len(opened.pages) == 1


def test_library_errors_become_coded_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    from docfence.engines import preflight as module

    def explode(*_: object) -> None:
        raise RecursionError("deep")

    monkeypatch.setattr(module, "check_streams", explode)
    with pytest.raises(OverLimits):
        preflight(pdfs.many_pages(1), JobPolicy())

    def broken(*_: object) -> None:
        raise pikepdf.PdfError("unreadable object")

    monkeypatch.setattr(module, "check_streams", broken)
    with pytest.raises(MalformedPdf):
        preflight(pdfs.many_pages(1), JobPolicy())


def _with_damaged_image(used: bool) -> bytes:
    """One page; an image whose Flate data is invalid (a block of reserved type 3), in the page's
    resources or only hanging off the catalog."""
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(1)))
    image = pdf.make_stream(b"")
    image.write(b"\x78\x9c\xff\xff\xff\xff", filter=pikepdf.Name.FlateDecode)
    image.Type, image.Subtype, image.Width, image.Height = (pikepdf.Name.XObject, pikepdf.Name.Image, 4, 4)
    image.ColorSpace, image.BitsPerComponent = pikepdf.Name.DeviceGray, 8
    if used:
        pdf.pages[0].obj.Resources.XObject = pikepdf.Dictionary(Im=image)
    else:
        pdf.Root.Unused = image
    return _save(pdf)


def test_damaged_stream_data_a_page_uses_is_refused_in_vector_mode_before_any_render() -> None:
    # vector outputs keep the stream's bytes, which the validator's full read would reject after the
    # renders; raster outputs redraw the page, and unused streams are dropped by the sanitiser
    with pytest.raises(CorruptContent) as refused:
        preflight(_with_damaged_image(used=True), JobPolicy())
    assert "does not decode" in refused.value.message
    assert preflight(_with_damaged_image(used=True), JobPolicy(mode=Mode.RASTER)).pages
    assert preflight(_with_damaged_image(used=False), JobPolicy()).pages


@pytest.mark.parametrize("pages", [1, 250])  # one page: the serial walk; 250: the pieces split across cores
def test_an_inline_image_without_its_data_is_refused(pages: int) -> None:
    """`BI EI` with neither a dictionary nor `ID`: libqpdf tokenises it, pikepdf fails to assemble the
    inline image. The content check parses only for its errors, but keeps inline images among what it
    hands back, so this page is still refused, not half-rendered (a check that hands nothing back
    passed it)."""
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(pages)))
    page = pdf.pages[pages - 1].obj
    page.Contents = pdf.make_stream(b"q BI EI Q 0 0 m 10 10 l S")
    with pytest.raises(MalformedPdf):
        preflight(_save(pdf), JobPolicy())
