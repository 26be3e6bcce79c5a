"""The second reader re-reads an output from its bytes: libqpdf in this process (or in a forked process
beside the page proof for long outputs) and poppler's pdfinfo as a subprocess. Each test plants damage
that only a full read finds (a stream that does not decode) or kills the forked read, and checks that
the report fails closed."""

from __future__ import annotations

import dataclasses
import io
import os

import pikepdf
import pytest

from docfence.engines import second_reader
from docfence.engines.geometry import PageGeometry, page_geometry
from docfence.engines.second_reader import SecondReader
from docfence.samples import pdfs

from .helpers import mutate


def _geometries(data: bytes) -> list[PageGeometry]:
    with pikepdf.open(io.BytesIO(data)) as pdf:
        return [page_geometry(p.obj) for p in pdf.pages]


def _bad_stream(pdf: pikepdf.Pdf) -> None:
    """A page gets an extra content stream whose Flate data does not decode: the file opens cleanly
    (streams are read lazily), so only a reader that decodes every stream sees it."""
    page = pdf.pages[0].obj
    broken = pdf.make_stream(b"this is not zlib data at all")
    broken.Filter = pikepdf.Name.FlateDecode
    page.Contents = pikepdf.Array([page.Contents, broken])


@pytest.mark.parametrize("parse_content", [False, True])
@pytest.mark.parametrize("background", [False, True])
def test_a_stream_that_does_not_decode_fails(parse_content: bool, background: bool) -> None:
    good = pdfs.many_pages(3)
    control = SecondReader(good, None, 3, parse_content=parse_content, background=background)
    assert control.finish(_geometries(good))["ok"]
    bad = mutate(good, _bad_stream)
    with pikepdf.open(io.BytesIO(bad)) as pdf:
        assert not pdf.get_warnings()  # opening alone does not find it
    report = SecondReader(bad, None, 3, parse_content=parse_content, background=background).finish(
        _geometries(bad))
    assert not report["ok"]
    assert report["failures"][0].startswith(second_reader.qpdf_method(parse_content)), report


def test_a_forked_read_that_dies_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = os.getpid()

    def dies_in_child(*_args: object, **_kwargs: object) -> list[str]:
        if os.getpid() != parent:
            os._exit(3)
        return []

    monkeypatch.setattr(second_reader, "qpdf_read", dies_in_child)
    data = pdfs.many_pages(2)
    report = SecondReader(data, None, 2, parse_content=False, background=True).finish(_geometries(data))
    assert not report["ok"]
    assert report["failures"] == [f"{second_reader.qpdf_method(False)} did not complete"]


def test_poppler_still_reads_the_geometry() -> None:
    """pdfinfo (the reader independent of libqpdf and pdfium) compares every page's boxes."""
    data = pdfs.many_pages(2)
    expected = _geometries(data)
    moved = [expected[0], dataclasses.replace(expected[1], rotate=90)]
    report = SecondReader(data, None, 2, parse_content=False).finish(moved)
    assert report["failures"] == ["poppler: page 2 rotation differs"]
    assert report["readers"] == [second_reader.qpdf_method(False), "poppler pdfinfo -box"]


def test_an_encrypted_output_is_read_with_its_password() -> None:
    data = pdfs.many_pages(1)
    with pikepdf.open(io.BytesIO(data)) as pdf:
        out = io.BytesIO()
        pdf.save(out, encryption=pikepdf.Encryption(owner="o", user="u"))
    locked = out.getvalue()
    report = SecondReader(locked, "u", 1, parse_content=True).finish([])
    assert report["ok"] and report["readers"] == [second_reader.qpdf_method(True)]
    wrong = SecondReader(locked, "x", 1, parse_content=True).finish([])
    assert not wrong["ok"]


def test_pdfinfo_reads_a_long_document_while_the_caller_works() -> None:
    """pdfinfo's report on 400 pages (~70 KB, more than a pipe holds) must not wait for `finish`:
    pdfinfo reads the whole output beside the caller's own checks and exits, and finish then sees every
    page. (Through a pipe it stopped after the first pages until finish drained it.)"""
    data = pdfs.many_pages(400)
    reader = SecondReader(data, None, 400, parse_content=False)
    assert reader.poppler is not None
    assert reader.poppler.proc.wait(timeout=60) == 0  # exits with nobody reading its report
    expected = _geometries(data)
    moved = [*expected[:399], dataclasses.replace(expected[399], rotate=180)]
    assert reader.finish(moved)["failures"] == ["poppler: page 400 rotation differs"]


def test_a_pdfinfo_that_runs_out_of_time_is_killed_and_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(second_reader, "_TIMEOUT_S", 0.05)
    hung = second_reader._Poppler(["sleep", "60"])  # a reader that never answers
    assert hung.finish() == (-1, "")
    assert hung.proc.returncode is not None  # killed and reaped, not left behind


def test_a_failing_structure_read_leaves_no_pdfinfo_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error out of the libqpdf read propagates, and pdfinfo is killed and reaped with it."""
    def breaks(*_: object, **__: object) -> list[str]:
        raise MemoryError("out of memory in the structure read")

    monkeypatch.setattr(second_reader, "qpdf_read", breaks)
    data = pdfs.many_pages(2)
    reader = SecondReader(data, None, 2, parse_content=False)
    assert reader.poppler is not None
    with pytest.raises(MemoryError):
        reader.finish(_geometries(data))
    assert reader.poppler.proc.returncode is not None and reader.poppler.report.closed
    assert reader.path is not None and not os.path.exists(reader.path)
