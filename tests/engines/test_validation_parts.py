"""The validator's small parts: page-range splitting and reporting, the content scan that decides where
structure proves the mark visible, and structural equality across two files."""

from __future__ import annotations

import io

import pikepdf
import pytest

from docfence.engines.checks import page_ranges
from docfence.engines.content_proof import Same
from docfence.engines.mark_proof import scan_content
from docfence.engines.parallel import map_ranges, split
from docfence.samples import pdfs


def test_split_covers_every_page_once() -> None:
    for count in (1, 2, 3, 199, 2000):
        for parts in (1, 2, 3, 8):
            ranges = split(count, parts)
            assert [i for a, b in ranges for i in range(a, b)] == list(range(count))
            assert len(ranges) == min(parts, count)


def test_map_ranges_runs_pieces_in_forked_processes() -> None:
    import os

    parent = os.getpid()
    results = map_ranges(lambda a, b: (a, b, os.getpid() == parent), split(10, 3))
    assert results == [(0, 3, False), (3, 7, False), (7, 10, True)]


def test_page_ranges_are_one_based_and_compact() -> None:
    assert page_ranges([0, 1, 2, 6, 8, 9]) == "1-3,7,9-10"
    assert page_ranges(range(500)) == "1-500"
    assert page_ranges([]) == ""


_PDF = pikepdf.new()  # owns the test streams (a stream dies with its Pdf)


def _streams(*contents: bytes) -> list[pikepdf.Stream]:
    return [_PDF.make_stream(c) for c in contents]


@pytest.mark.parametrize(
    ("content", "balanced"),
    [
        (b"q 1 0 0 1 0 0 cm BT /F1 9 Tf (a Q in text) Tj ET Q", True),
        (b"q BT (nested (Q) parens and \\) escapes) Tj ET Q", True),
        (b"Q 2 0 0 2 0 0 cm", False),  # pops the wrapper's q: the mark would be drawn scaled
        (b"q q Q", False),
        (b"q <5151> Tj % Q in a comment\nQ", True),
        (b"q /Q gs /q Do Q", True),  # names, not operators
        (b"q[1 2]0 d Q", True),
        (b"BI /W 1 /H 1 /BPC 8 /CS /G ID \x00 EI", None),  # inline image data: cannot tell
        (b"(a ((deep)) string) Tj", None),
    ],
)
def test_content_scan_reads_the_graphics_state_balance(content: bytes, balanced: bool | None) -> None:
    assert scan_content(_streams(content)).balanced is balanced


def test_content_scan_balance_spans_the_page_streams() -> None:
    assert scan_content(_streams(b"q 1 g", b"0 0 10 10 re f Q")).balanced is True


def test_content_scan_sees_painting_only_when_asked() -> None:
    assert scan_content(_streams(b"0 0 10 10 re f"), paints_wanted=True).paints is True
    assert scan_content(_streams(b"BT (f) Tj ET"), paints_wanted=True).paints is False
    assert scan_content(_streams(b"0 0 10 10 re f"), paints_wanted=False).paints is None


def test_same_compares_across_renumbered_files() -> None:
    data = pdfs.links()
    first = pikepdf.open(io.BytesIO(data))
    buf = io.BytesIO()
    first.save(buf, object_stream_mode=pikepdf.ObjectStreamMode.generate)  # renumbers every object
    second = pikepdf.open(io.BytesIO(buf.getvalue()))
    pages_a = {p.obj.objgen: n for n, p in enumerate(first.pages, 1)}
    pages_b = {p.obj.objgen: n for n, p in enumerate(second.pages, 1)}
    same = Same(pages_a, pages_b)
    assert same(first.pages[0].obj.Annots, second.pages[0].obj.Annots)
    assert same(first.pages[0].obj.Resources, second.pages[0].obj.Resources)
    second.pages[0].obj.Annots[1].A.D[0] = second.pages[0].obj  # the link now points at page 1
    assert not Same(pages_a, pages_b)(first.pages[0].obj.Annots, second.pages[0].obj.Annots)
