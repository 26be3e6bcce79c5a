"""Preflight refuses what cannot be processed faithfully with stable codes, fast, and without leaking
document content into messages."""

from __future__ import annotations

import io
import zlib

import pikepdf
import pytest

from docfence.core.errors import (
    DocumentError,
    MalformedPdf,
    NoPages,
    NotAPdf,
    OverLimits,
    PageTreeInvalid,
    PasswordRequired,
    UnsupportedFeature,
)
from docfence.core.policy import JobPolicy, Limits, SanitizePolicy
from docfence.engines import samples
from docfence.engines.preflight import bounded_inflate, preflight


def _save(pdf: pikepdf.Pdf, **kwargs: object) -> bytes:
    buf = io.BytesIO()
    pdf.save(buf, **kwargs)  # type: ignore[arg-type]
    return buf.getvalue()


def test_not_a_pdf_by_content() -> None:
    with pytest.raises(NotAPdf):
        preflight(b"PK\x03\x04 a zip file", JobPolicy())


def test_bomb_fails_fast_without_inflating_everything() -> None:
    pdf = pikepdf.open(io.BytesIO(samples.many_pages(1)))
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
        preflight(samples.many_pages(20), JobPolicy(limits=limits))


def test_xfa_is_unsupported() -> None:
    pdf = pikepdf.open(io.BytesIO(samples.form()))
    pdf.Root.AcroForm.XFA = pdf.make_stream(b"<xdp:xdp/>")
    with pytest.raises(UnsupportedFeature):
        preflight(_save(pdf), JobPolicy(sanitize=SanitizePolicy.keep_all()))


def test_user_password_required() -> None:
    pdf = pikepdf.open(io.BytesIO(samples.unicode_text()))
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
    base = samples.many_pages(10)
    pdf = pikepdf.open(io.BytesIO(base))
    pdf.pages[0].obj.Rotate = 90
    update = io.BytesIO()
    pdf.save(update, compress_streams=False)  # a full rewrite stands in for an appended revision
    truncated = base + update.getvalue()[: len(update.getvalue()) // 2]
    assert len(truncated) - len(base) > 2048
    with pytest.raises(MalformedPdf):
        preflight(truncated, JobPolicy())
