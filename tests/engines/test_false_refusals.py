"""No false refusal: damage that qpdf, poppler and mupdf all read past (a cut end-of-file marker after a
complete trailer, a damaged %PDF header, page content naming a missing object or one that lost its
`stream` keyword, page content ending inside a string that swallowed the mark) is repaired, noted and
validated; a Web Capture link's saved URI (/PA) is judged as the link's own URI; a form drawing itself
once per level is watermarked and said; a zlib warning the input gives for a stream the output keeps is
not the output's. Each fixture is made here; the near miss of each (real truncation, not a PDF, an active
/PA, a form drawing itself twice, the mark swallowed, one more cut stream) is still refused or fails."""

from __future__ import annotations

import io
import shutil
import subprocess
import zlib
from pathlib import Path

import pikepdf
import pytest

from docfence.core.errors import MalformedPdf, NotAPdf, ValidationFailed
from docfence.core.policy import JobPolicy, Mode, SanitizePolicy
from docfence.engines import watermark_document
from docfence.engines.content_proof import stream_list
from docfence.engines.repair import lex_end
from docfence.engines.sanitize_residue import find_residue
from docfence.engines.second_reader import qpdf_read

from .helpers import CORPUS, mutate

WIDE = CORPUS.parent / "corpus-wide"
_TEXT = b"BT /F0 24 Tf 72 700 Td (Hello) Tj ET"
_NO_STREAM_KEYWORD = b"<< /Length 8 >>\n0 0 m S\nendstream"  # an object that lost its `stream` keyword


def raw_pdf(objects: dict[int, bytes], *, header: bytes = b"%PDF-1.4", tail: bytes = b"%%EOF\n") -> bytes:
    """A classic PDF written byte by byte (object bodies as given, a correct xref), so damage that no
    library would write can be planted: `objects` maps numbers to bodies; 1 is the catalog."""
    out = bytearray(header + b"\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    xref = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number] if number in offsets else b"0000000000 00000 f \n"
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n" % (size, xref) + tail
    return bytes(out)


def _page(contents: bytes) -> dict[int, bytes]:
    stream = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(_TEXT), _TEXT)
    return {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F0 5 0 R >> >> "
           b"/Contents " + contents + b" >>",
        4: stream,
        5: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }


def _readers_accept(data: bytes, tmp_path: Path, mutool_exits: tuple[int, ...] = (0,)) -> None:
    """The premise of each case: qpdf, pdfinfo and mutool all read the damaged input (mutool draws its
    page; `mutool_exits`: 1 too, where it reports the content's syntax error after drawing the page)."""
    path, drawn = tmp_path / "input.pdf", tmp_path / "drawn.ppm"
    path.write_bytes(data)
    for args, accepted in ((["qpdf", "--check"], (0, 3)), (["pdfinfo"], (0,)),
                           (["mutool", "draw", "-q", "-o", str(drawn)], mutool_exits)):
        if shutil.which(args[0]) is None:
            pytest.fail(f"{args[0]} is required")
        done = subprocess.run([*args, str(path)], capture_output=True, timeout=60, check=False)
        assert done.returncode in accepted, (args[0], done.stderr.decode()[-300:])
    assert drawn.stat().st_size > 0


def _processed(data: bytes, note: str) -> pikepdf.Pdf:
    result = watermark_document(data, JobPolicy())
    assert result.validation["ok"] and result.pages == 1
    assert any(note in n for n in result.validation["notes"]), result.validation["notes"]
    return pikepdf.open(io.BytesIO(result.output))


@pytest.mark.parametrize("tail", [b"%%EO", b"EOF\n", b""], ids=["cut-marker", "marker-without-percent",
                                                               "no-marker"])
def test_a_missing_end_of_file_marker_after_a_complete_trailer_is_repaired(
    tail: bytes, tmp_path: Path
) -> None:
    data = raw_pdf(_page(b"4 0 R"), tail=tail)
    _readers_accept(data, tmp_path)
    out = _processed(data, "end-of-file marker was missing or cut")
    assert b"Hello" in out.pages[0].Contents[1].read_bytes()  # the page's own stream, inside the marks


def test_a_file_cut_before_its_trailer_ends_stays_refused() -> None:
    data = raw_pdf(_page(b"4 0 R"), tail=b"")
    for cut in (data[: data.rindex(b"startxref") + 10], data[: data.rindex(b"trailer") + 12]):
        with pytest.raises(MalformedPdf, match="truncated"):
            watermark_document(cut, JobPolicy())


@pytest.mark.parametrize("header", [b"%PDF.1.4", b"%PDF_1.7"])
def test_a_damaged_header_is_repaired(header: bytes, tmp_path: Path) -> None:
    data = raw_pdf(_page(b"4 0 R"), header=header)
    _readers_accept(data, tmp_path)
    _processed(data, "the %PDF header is damaged")


def test_bytes_without_a_pdf_header_stay_not_a_pdf() -> None:
    data = raw_pdf(_page(b"4 0 R"), header=b"%PS-Adobe-3.0")
    with pytest.raises(NotAPdf):
        watermark_document(data, JobPolicy())


@pytest.mark.parametrize(
    ("contents", "objects"),
    [(b"[9 0 R]", {}), (b"[6 0 R]", {6: _NO_STREAM_KEYWORD}), (b"6 0 R", {6: _NO_STREAM_KEYWORD})],
    ids=["missing-object", "stream-keyword-missing", "stream-keyword-missing-direct"],
)
def test_content_that_is_not_a_stream_is_dropped_as_readers_do(
    contents: bytes, objects: dict[int, bytes], tmp_path: Path
) -> None:
    data = raw_pdf({**_page(contents), **objects})
    _readers_accept(data, tmp_path)
    out = _processed(data, "named content that is not a stream")
    streams = out.pages[0].Contents
    assert all(isinstance(s, pikepdf.Stream) for s in streams) and len(streams) == 2  # the marks' two


def test_content_next_to_a_missing_object_is_kept() -> None:
    out = _processed(raw_pdf(_page(b"[4 0 R 9 0 R]")), "named content that is not a stream")
    assert [b"Hello" in s.read_bytes() for s in out.pages[0].Contents] == [False, True, False]


def _web_capture_link(uri: str) -> bytes:
    """A page whose link Web Capture turned into a go-to, keeping its former URI action in /PA."""
    data = raw_pdf(_page(b"4 0 R"))

    def link(pdf: pikepdf.Pdf) -> None:
        page = pdf.pages[0]
        page.obj.Annots = pdf.make_indirect(pikepdf.Array([pdf.make_indirect(pikepdf.Dictionary(
            Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Link, Rect=[72, 690, 200, 720], Border=[0, 0, 0],
            A=pikepdf.Dictionary(S=pikepdf.Name.GoTo, D=[page.obj, pikepdf.Name.Fit]),
            PA=pikepdf.Dictionary(S=pikepdf.Name.URI, URI=pikepdf.String(uri))))]))
    return mutate(data, link)


def _pa(output: bytes) -> str | None:
    """The output link's saved URI, or None when it has no /PA."""
    pdf = pikepdf.open(io.BytesIO(output))  # kept open while its objects are read
    saved = pdf.pages[0].Annots[0].get("/PA")
    return None if saved is None else str(saved.URI)


def test_a_web_capture_links_saved_uri_is_kept_with_link_uris() -> None:
    result = watermark_document(_web_capture_link("https://example.org/"), JobPolicy())
    assert result.validation["ok"]
    assert _pa(result.output) == "https://example.org/"


def test_a_saved_uri_is_stripped_with_link_uris_or_an_active_scheme() -> None:
    strip = JobPolicy(sanitize=SanitizePolicy(link_uris="strip"))
    for data, policy in ((_web_capture_link("https://example.org/"), strip),
                         (_web_capture_link("javascript:app.alert(1)"), JobPolicy())):
        result = watermark_document(data, policy)
        assert result.validation["ok"] and _pa(result.output) is None


def test_an_active_saved_uri_left_in_an_output_is_residue() -> None:
    planted = pikepdf.open(io.BytesIO(_web_capture_link("javascript:app.alert(1)")))
    assert [f.kind for f in find_residue(planted, SanitizePolicy())] == ["javascript_uri"]
    on_a_widget = pikepdf.open(io.BytesIO(_web_capture_link("https://example.org/")))
    on_a_widget.pages[0].Annots[0].Subtype = pikepdf.Name.Widget  # not a link: no link URI to keep
    assert [f.kind for f in find_residue(on_a_widget, SanitizePolicy())] == ["uri_action"]


@pytest.mark.parametrize("name", [
    "formatcorp__T04_003_EOF-incomplete-EO.pdf",
    "formatcorp__T04_004_EOF-incomplete_EOF.pdf",
    "formatcorp__T01_005_header-invalid-syntax-replace-char.pdf",
    "formatcorp__T02-03_011_page-object-wrong-contents-reference.pdf",
    "formatcorp__T02-05-01_013_stream-keyword-missing.pdf",
    "formatcorp__webCapture.pdf",
    # government documents whose damaged pages end inside strings and arrays that swallowed the mark
    *(f"formatcorp__{n}.pdf" for n in ("040669", "226387", "303226", "367594", "392154", "477139", "507618")),
    "formatcorp__509284.pdf",  # and a kept Flate stream without its end, which qpdf warns about in both
])
def test_wide_corpus_files_every_reader_reads_are_validated(name: str) -> None:
    if not WIDE.is_dir():
        pytest.skip(f"the shared wide corpus is absent ({WIDE})")
    result = watermark_document((WIDE / name).read_bytes(), JobPolicy())
    assert result.validation["ok"]


def _self_drawing(pair: bool) -> bytes:
    """A page drawing a form that draws itself (or, `pair`, a form drawing a second that draws the first),
    smaller each time, once per level: readers draw it and break the cycle."""
    def form(target: int) -> bytes:
        body = b"0 0 1 rg 10 10 50 50 re f 0.5 0 0 0.5 20 20 cm /X0 Do"
        return (b"<< /Type /XObject /Subtype /Form /BBox [0 0 100 100] /Resources << /XObject << /X0 %d 0 R "
                b">> >> /Length %d >>\nstream\n%s\nendstream" % (target, len(body), body))
    objects = _page(b"[4 0 R 7 0 R]")
    fonts = b"/Font << /F0 5 0 R >>"
    objects[3] = objects[3].replace(fonts, fonts + b" /XObject << /X0 6 0 R >>")
    objects[7] = b"<< /Length 7 >>\nstream\n/X0 Do\nendstream"
    objects.update({6: form(8), 8: form(6)} if pair else {6: form(6)})
    return raw_pdf(objects)


@pytest.mark.parametrize("mode", ["vector", "raster"])
@pytest.mark.parametrize("pair", [False, True], ids=["self", "pair"])
def test_a_form_that_draws_itself_is_watermarked_and_said(pair: bool, mode: str, tmp_path: Path) -> None:
    data = _self_drawing(pair)
    _readers_accept(data, tmp_path)
    result = watermark_document(data, JobPolicy(mode=Mode(mode)))
    assert result.validation["ok"] and result.pages == 1
    assert any("draws itself" in n and "not walked" in n for n in result.validation["notes"])


_OPEN_STRING = _TEXT + b"\nBT 72 600 Td (never (closed) \\) Tj ET\n"  # the tail swallows what follows


def test_content_ending_inside_a_string_is_closed_and_the_mark_drawn(tmp_path: Path) -> None:
    objects = _page(b"4 0 R")
    objects[4] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(_OPEN_STRING), _OPEN_STRING)
    data = raw_pdf(objects)
    _readers_accept(data, tmp_path, mutool_exits=(0, 1))
    for mode in ("vector", "raster"):
        result = watermark_document(data, JobPolicy(mode=Mode(mode)))
        assert result.validation["ok"]
        assert any("ended inside a string" in n for n in result.validation["notes"])


def test_without_the_closing_the_swallowed_mark_fails_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted defect: the same page, its content left open, and the mark after it is not drawn."""
    from docfence.engines import preflight as module

    objects = _page(b"4 0 R")
    objects[4] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(_OPEN_STRING), _OPEN_STRING)
    monkeypatch.setattr(module, "close_open_content", lambda pdf, pages: [])
    with pytest.raises(ValidationFailed) as failed:
        watermark_document(raw_pdf(objects), JobPolicy())
    report = failed.value.report
    assert report is not None
    assert [c["name"] for c in report["checks"] if not c["ok"]] == ["watermark_rendered"]


@pytest.mark.parametrize(("content", "closer"), [
    (b"BT (a) Tj ET", b""),
    (b"BT (a \\( b) Tj ET", b""),  # an escaped parenthesis opens nothing
    (b"BT (a (b) c", b")\n ET\n"),
    (b"BT [(a) -3 (b", b")\n] ET\n"),
    (b"% (a comment\nBT ET", b""),
    (b"BI /W 1 /H 1 /BPC 8 /CS /G ID ((( EI q Q", b""),  # image data is no syntax
    (b"<< /A (x) >> BDC", b""),
    (b"/P << /MCID 0 >> BDC BT (x", b")\n ET\n"),
    (b"BT /F0 1 Tf (x) TjET", b"\n ET\n"),  # "TjET" is one (unknown) operator: the text stays open
    (b"ID ( EI", b")\n\n"),  # ID outside an inline image is an unknown operator, not image data
    (b"BT (x BI /W 1", b")\n ET\n"),  # inside a string: no image
    (b"BT (x) Tj BI /W 1 /H 1 (", b""),  # an open inline image is not closed: that would draw one
])
def test_lex_end_finds_what_is_left_open(content: bytes, closer: bytes) -> None:
    assert lex_end(content).closer() == closer


def _with_cut_flate(data: bytes, copies: int) -> bytes:
    """`copies` more page streams whose zlib data lacks its end (zlib still decodes all of it)."""
    def cut(pdf: pikepdf.Pdf) -> None:
        page = pdf.pages[0].obj
        extra = []
        for _ in range(copies):
            stream = pikepdf.Stream(pdf, zlib.compress(b"0 0 1 rg 10 10 100 100 re f")[:-4])
            stream.Filter = pikepdf.Name.FlateDecode
            extra.append(stream)
        page.Contents = pikepdf.Array([*(stream_list(page.Contents) or []), *extra])
    return mutate(data, cut)


def test_a_kept_stream_without_its_zlib_end_is_not_the_outputs_fault() -> None:
    data = _with_cut_flate(raw_pdf(_page(b"4 0 R")), 1)
    result = watermark_document(data, JobPolicy())
    assert result.validation["ok"]


def test_a_stream_without_its_zlib_end_the_input_lacks_still_fails() -> None:
    clean = raw_pdf(_page(b"4 0 R"))
    one, two = _with_cut_flate(clean, 1), _with_cut_flate(clean, 2)
    for parse in (False, True):
        assert qpdf_read(one, None, parse_content=parse, source=one) == []
        assert qpdf_read(one, None, parse_content=parse, source=clean) != []
        assert qpdf_read(two, None, parse_content=parse, source=one) != []  # one more than the input's
