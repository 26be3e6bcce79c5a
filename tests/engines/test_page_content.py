"""Every page's content must decode before any work; long documents are checked in pieces across the
cores, and the result must be the serial walk's: the first failing page's refusal, in page order, and a
piece that gives no answer fails closed."""

from __future__ import annotations

import io
import os

import pikepdf
import pytest

from docfence.core.errors import CorruptContent, MalformedPdf, OverLimits
from docfence.core.policy import JobPolicy, Limits, Mode
from docfence.engines import page_content
from docfence.engines.parallel import usable_cores
from docfence.engines.preflight import preflight
from docfence.samples import pdfs

PAGES = 400  # long enough to be split (page_content._PARALLEL_FROM_PAGES)


def _damaged(corrupt: int | None = None, oversized: int | None = None, image: int | None = None) -> bytes:
    """PAGES pages; page `corrupt` (0-based) gets Flate data that does not decode, page `oversized` an
    uncompressed content stream of 300,000 spaces, page `image` an image resource whose Flate data does
    not decode (the content stays clean)."""
    pdf = pikepdf.open(io.BytesIO(pdfs.many_pages(PAGES)))
    if image is not None:
        bad = pdf.make_stream(b"")
        bad.write(b"\x78\x9c\xff\xff\xff\xff", filter=pikepdf.Name.FlateDecode)
        bad.Type, bad.Subtype, bad.Width, bad.Height = (pikepdf.Name.XObject, pikepdf.Name.Image, 4, 4)
        bad.ColorSpace, bad.BitsPerComponent = pikepdf.Name.DeviceGray, 8
        pdf.pages[image].obj.Resources.XObject = pikepdf.Dictionary(Im=bad)
    if corrupt is not None:
        broken = pdf.make_stream(b"")
        broken.write(b"\x78\x9c\xff\xff\xff\xff", filter=pikepdf.Name.FlateDecode)
        pdf.pages[corrupt].obj.Contents = broken
    if oversized is not None:
        pdf.pages[oversized].obj.Contents = pdf.make_stream(b" " * 300_000)
    out = io.BytesIO()
    pdf.save(out, compress_streams=False)  # else check_streams, an earlier step, refuses the big one
    return out.getvalue()


POLICY = JobPolicy(limits=Limits(max_stream_bytes=200_000))


def test_the_split_check_passes_a_clean_long_document() -> None:
    assert len(preflight(_damaged(), POLICY).pages) == PAGES


@pytest.mark.parametrize("where", [3, PAGES - 2])
def test_a_page_that_does_not_decode_is_refused_in_either_piece(where: int) -> None:
    with pytest.raises(CorruptContent):
        preflight(_damaged(corrupt=where), POLICY)


def test_the_first_failing_page_in_page_order_decides() -> None:
    with pytest.raises(OverLimits):
        preflight(_damaged(oversized=PAGES - 2), POLICY)
    with pytest.raises(CorruptContent):  # page 11 fails before page 399, though another piece checks it
        preflight(_damaged(corrupt=10, oversized=PAGES - 2), POLICY)
    with pytest.raises(OverLimits):
        preflight(_damaged(corrupt=PAGES - 2, oversized=10), POLICY)


def test_stream_data_a_late_page_uses_is_refused_in_vector_mode_only() -> None:
    with pytest.raises(CorruptContent):
        preflight(_damaged(image=PAGES - 5), POLICY)
    raster = JobPolicy(mode=Mode.RASTER, limits=POLICY.limits)
    assert len(preflight(_damaged(image=PAGES - 5), raster).pages) == PAGES


def test_every_page_content_is_checked_before_any_stream_data() -> None:
    """Serial order: a content refusal on a late page wins over damaged stream data on an early one."""
    with pytest.raises(OverLimits):
        preflight(_damaged(image=3, oversized=PAGES - 2), POLICY)


@pytest.mark.skipif(usable_cores() < 2, reason="one core: the check is not split")
def test_a_piece_that_gives_no_answer_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = os.getpid()
    real = page_content.check_page_content

    def dies_in_child(page: pikepdf.Dictionary, limits: Limits) -> None:
        if os.getpid() != parent:
            os._exit(3)
        real(page, limits)

    monkeypatch.setattr(page_content, "check_page_content", dies_in_child)
    with pytest.raises(MalformedPdf, match="could not be checked"):
        preflight(_damaged(), POLICY)
