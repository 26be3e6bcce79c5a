"""Planted defects of several marks: a page whose `{page}` number is wrong, a page missing its second
mark, marks drawn in the wrong order. Each broken output must fail the named check in standard and in
exhaustive validation (`required <= failed`)."""

from __future__ import annotations

import pikepdf
import pytest

from docfence.core.policy import JobPolicy, WatermarkSpec
from docfence.engines.marks import MarkSet
from docfence.engines.preflight import preflight
from docfence.engines.validate import validate
from docfence.engines.vector import draw_bytes, watermark_vector
from docfence.samples import pdfs

from .helpers import mutate

LEVELS = ("standard", "exhaustive")
POLICY = JobPolicy(
    watermark=WatermarkSpec(),
    marks=(WatermarkSpec.from_mapping({"text": "{recipient} · {page}/{pages}", "position": "footer"}),),
    fields={"recipient": "Dr. Ada Example"},
)


@pytest.fixture(scope="module")
def pair() -> tuple[bytes, bytes]:
    data = pdfs.many_pages(12)
    return data, watermark_vector(preflight(data, POLICY), POLICY)


def failed(source: bytes, output: bytes, level: str) -> tuple[set[str], list[str]]:
    report = validate(source, output, MarkSet.of(POLICY), mode="vector", level=level)
    bad = [c for c in report["checks"] if not c["ok"]]
    return {c["name"] for c in bad}, [f for c in bad for f in c["failures"]]


def test_the_untouched_pair_validates(pair: tuple[bytes, bytes]) -> None:
    assert failed(*pair, "standard") == (set(), [])


@pytest.mark.parametrize("level", LEVELS)
def test_a_page_whose_page_number_is_wrong(pair: tuple[bytes, bytes], level: str) -> None:
    """Page 7 draws page 8's footer ("8/12"): every byte of it is a valid mark, for the wrong page."""

    def swap(pdf: pikepdf.Pdf) -> None:
        pdf.pages[6].obj.Resources.XObject.DfWm1 = pdf.pages[7].obj.Resources.XObject.DfWm1

    names, failures = failed(pair[0], mutate(pair[1], swap), level)
    assert {"watermark_structure"} <= names
    assert any(f.startswith("page 7: mark 2") and "page number" in f for f in failures)


@pytest.mark.parametrize("level", LEVELS)
def test_a_page_missing_its_second_mark(pair: tuple[bytes, bytes], level: str) -> None:
    def drop(pdf: pikepdf.Pdf) -> None:
        page = pdf.pages[3].obj
        last = page.Contents[len(page.Contents) - 1]
        page.Contents[len(page.Contents) - 1] = pdf.make_stream(
            last.read_bytes().replace(draw_bytes("/DfWm1"), b""))
        del page.Resources.XObject["/DfWm1"]

    names, failures = failed(pair[0], mutate(pair[1], drop), level)
    assert {"watermark_structure"} <= names
    assert any(f.startswith("page 4: mark 2 missing") for f in failures)


@pytest.mark.parametrize("level", LEVELS)
def test_marks_drawn_in_the_wrong_order(pair: tuple[bytes, bytes], level: str) -> None:
    """The footer drawn under the diagonal instead of over it: both present, the stacking is not ours."""

    def reorder(pdf: pikepdf.Pdf) -> None:
        page = pdf.pages[1].obj
        swapped = b"Q\n" + draw_bytes("/DfWm1") + draw_bytes("/DfWm0")
        page.Contents[len(page.Contents) - 1] = pdf.make_stream(swapped)

    names, _ = failed(pair[0], mutate(pair[1], reorder), level)
    assert {"watermark_structure"} <= names


@pytest.mark.parametrize("level", LEVELS)
def test_a_page_number_drawn_with_another_digit(pair: tuple[bytes, bytes], level: str) -> None:
    """Page 7's footer draws /D7 as the mark's shared resources say, but its own resources map /D7 to
    the outline of an 8: the content bytes are right, the digit drawn is not."""

    def other_digit(pdf: pikepdf.Pdf) -> None:
        form = pdf.pages[6].obj.Resources.XObject.DfWm1
        own = pikepdf.Dictionary(form.Resources)  # a copy for this page alone, then one digit swapped
        own.XObject = pikepdf.Dictionary(own.XObject)
        own.XObject.D7 = own.XObject.D8
        form.Resources = own

    names, failures = failed(pair[0], mutate(pair[1], other_digit), level)
    assert {"watermark_structure"} <= names
    assert any(f.startswith("page 7: mark 2") for f in failures)
