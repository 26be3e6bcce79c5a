"""Planted defects: each broken output must fail validation, in standard and in exhaustive mode, and each
test names the checks that must catch it (`required <= failed`), so removing or weakening any of those
checks fails a test; other checks may fail too. Fixtures are generated in code (docfence.samples.pdfs
and tests/engines/helpers.py)."""

from __future__ import annotations

import dataclasses
import os

import pikepdf
import pytest

from docfence.core.policy import JobPolicy, WatermarkSpec
from docfence.engines import page_checks
from docfence.engines.preflight import preflight
from docfence.engines.validate import validate
from docfence.engines.vector import watermark_vector
from docfence.samples import pdfs

from .helpers import cover_with_image, mutate, opaque_stamp_page, remapped_font_pages, scanned_pages

SPEC = WatermarkSpec()
LEVELS = ("standard", "exhaustive")


def watermarked(data: bytes, spec: WatermarkSpec = SPEC) -> bytes:
    """The engine's output, not yet validated (the tests validate it themselves)."""
    policy = JobPolicy(watermark=spec)
    return watermark_vector(preflight(data, policy), policy)


def failed(report: dict[str, object]) -> set[str]:
    return {c["name"] for c in report["checks"] if not c["ok"]}  # type: ignore[attr-defined, index]


def run(source: bytes, output: bytes, level: str, spec: WatermarkSpec = SPEC) -> dict[str, object]:
    report = validate(source, output, spec, mode="vector", level=level)
    assert report["level"] == level
    return report


@pytest.fixture(scope="module")
def long_pair() -> tuple[bytes, bytes]:
    data = pdfs.many_pages(500)
    return data, watermarked(data)


@pytest.fixture(scope="module")
def text_pair() -> tuple[bytes, bytes]:
    data = pdfs.many_pages(3)
    return data, watermarked(data)


@pytest.fixture(scope="module")
def links_pair() -> tuple[bytes, bytes]:
    data = pdfs.links()
    return data, watermarked(data)


@pytest.mark.parametrize("level", LEVELS)
def test_sound_outputs_pass(
    long_pair: tuple[bytes, bytes], links_pair: tuple[bytes, bytes], level: str
) -> None:
    """The control: without a planted defect, both levels pass (else every test below proves nothing)."""
    for source, output in (long_pair, links_pair):
        report = run(source, output, level)
        assert report["ok"], failed(report)


def test_standard_renders_a_sample_and_proves_the_rest_by_structure(long_pair: tuple[bytes, bytes]) -> None:
    report = run(*long_pair, "standard")
    checks = {c["name"]: c for c in report["checks"]}  # type: ignore[attr-defined]
    assert checks["watermark_structure"]["pages"] == "1-500"
    assert checks["text_preserved"]["pages"] == "1-500"
    rendered = checks["watermark_rendered"]["pages"]
    assert rendered != "1-500" and rendered.endswith("500"), rendered
    assert checks["watermark_rendered"]["why"] == {"sample (cross-check of the structural proof)": rendered}
    exhaustive = {c["name"]: c for c in run(*long_pair, "exhaustive")["checks"]}  # type: ignore[attr-defined]
    assert exhaustive["watermark_rendered"]["pages"] == "1-500"
    assert exhaustive["text_extracted"]["pages"] == "1-500"


@pytest.mark.parametrize("level", LEVELS)
def test_mark_missing_on_one_page_of_500(long_pair: tuple[bytes, bytes], level: str) -> None:
    def strip_page_250(pdf: pikepdf.Pdf) -> None:
        page = pdf.pages[249].obj
        page.Contents = pikepdf.Array(list(page.Contents)[1:-1])

    report = run(long_pair[0], mutate(long_pair[1], strip_page_250), level)
    expected = {"watermark_structure"} | ({"watermark_rendered"} if level == "exhaustive" else set())
    assert failed(report) == expected
    mark = next(c for c in report["checks"] if c["name"] == "watermark_structure")  # type: ignore[attr-defined]
    assert mark["failures"] == ["page 250: watermark missing or content layout changed (structure)"]


@pytest.mark.parametrize("level", LEVELS)
def test_mark_replaced_by_an_empty_form(text_pair: tuple[bytes, bytes], level: str) -> None:
    def empty_mark(pdf: pikepdf.Pdf) -> None:
        xobjects = pdf.pages[1].obj.Resources.XObject
        name = next(k for k in xobjects if k.startswith("/DfWm"))
        form = pdf.make_stream(b"")
        form.Type, form.Subtype = pikepdf.Name.XObject, pikepdf.Name.Form
        form.BBox = pikepdf.Array([0, 0, 1, 1])
        xobjects[name] = form

    report = run(text_pair[0], mutate(text_pair[1], empty_mark), level)
    expected = {"watermark_structure"} | ({"watermark_rendered"} if level == "exhaustive" else set())
    assert failed(report) == expected


@pytest.mark.parametrize("level", LEVELS)
def test_one_word_dropped_on_one_page(text_pair: tuple[bytes, bytes], level: str) -> None:
    def drop_word(pdf: pikepdf.Pdf) -> None:
        own = pdf.pages[1].obj.Contents[1]
        content = own.read_bytes()
        assert b"(Line 5: synthetic report" in content
        own.write(content.replace(b"(Line 5: synthetic report", b"(Line 5: report", 1))

    report = run(text_pair[0], mutate(text_pair[1], drop_word), level)
    required = {"content_preserved", "text_preserved"}
    assert required | ({"text_extracted"} if level == "exhaustive" else set()) <= failed(report)


@pytest.mark.parametrize("level", LEVELS)
def test_output_draws_an_opaque_image_over_the_mark(text_pair: tuple[bytes, bytes], level: str) -> None:
    def cover(pdf: pikepdf.Pdf) -> None:
        page = pdf.pages[0].obj
        page.Contents.append(pdf.make_stream(cover_with_image(page, pdf)))

    report = run(text_pair[0], mutate(text_pair[1], cover), level)
    assert "content_preserved" not in failed(report)  # the page's own streams are all still there
    # page 1 is in the rendered sample of a 3-page document, so pixels catch it in both levels
    assert {"watermark_structure", "resources_preserved", "watermark_rendered"} <= failed(report)


@pytest.mark.parametrize("level", LEVELS)
def test_underlay_hidden_under_an_opaque_full_page_image(level: str) -> None:
    """A sound engine output whose mark is nonetheless invisible: only pixels can prove it, so standard
    mode must render exactly the pages whose content may cover an underlay."""
    spec = WatermarkSpec(layer="underlay")
    source = scanned_pages(3)
    report = run(source, watermarked(source, spec), level, spec)
    assert failed(report) == {"watermark_rendered"}
    rendered = next(c for c in report["checks"] if c["name"] == "watermark_rendered")  # type: ignore[attr-defined]
    assert rendered["pages"] == "1-3"
    assert len(rendered["failures"]) == 3


@pytest.mark.parametrize("level", LEVELS)
def test_overlay_hidden_under_an_opaque_annotation(level: str) -> None:
    """Page 6 of 12 (outside the standard sample) is rendered because an appearance is drawn above it."""
    source = opaque_stamp_page(12, stamped=5)
    report = run(source, watermarked(source), level)
    assert failed(report) == {"watermark_rendered"}
    rendered = next(c for c in report["checks"] if c["name"] == "watermark_rendered")  # type: ignore[attr-defined]
    assert rendered["failures"] == ["page 6: watermark not visible when rendered"]
    if level == "standard":
        assert rendered["why"]["annotation appearances are drawn above the mark"] == "6"


@pytest.mark.parametrize("level", LEVELS)
def test_page_box_changed(links_pair: tuple[bytes, bytes], level: str) -> None:
    def shrink(pdf: pikepdf.Pdf) -> None:
        pdf.pages[1].obj.CropBox = pikepdf.Array([10, 10, 500, 700])

    report = run(links_pair[0], mutate(links_pair[1], shrink), level)
    assert "page_geometry" in failed(report)
    assert "page 2: page boxes or rotation changed" in next(
        c for c in report["checks"] if c["name"] == "page_geometry"  # type: ignore[attr-defined]
    )["failures"]


@pytest.mark.parametrize("level", LEVELS)
def test_inherited_rotation_changed(level: str) -> None:
    source = pdfs.rotated_pages()

    def unrotate(pdf: pikepdf.Pdf) -> None:
        node = pdf.pages[5].obj.Parent
        assert int(node.Rotate) == 90
        node.Rotate = 0

    report = run(source, mutate(watermarked(source), unrotate), level)
    assert "page_geometry" in failed(report)


@pytest.mark.parametrize("level", LEVELS)
def test_link_annotation_removed(links_pair: tuple[bytes, bytes], level: str) -> None:
    def drop_link(pdf: pikepdf.Pdf) -> None:
        del pdf.pages[0].obj.Annots[1]

    report = run(links_pair[0], mutate(links_pair[1], drop_link), level)
    assert failed(report) == {"annotations_and_links"}


@pytest.mark.parametrize("level", LEVELS)
def test_font_resource_renamed(level: str) -> None:
    """The renamed font re-encodes its codes, so the extracted text really changes (a reader falls back
    to another encoding without it): structure catches it without extracting anything."""
    source = remapped_font_pages(2)

    def rename(pdf: pikepdf.Pdf) -> None:
        fonts = pdf.pages[1].obj.Resources.Font
        fonts.F9 = fonts.F1
        del fonts.F1

    report = run(source, mutate(watermarked(source), rename), level)
    required = {"fonts", "resources_preserved", "text_preserved"}
    assert required | ({"text_extracted"} if level == "exhaustive" else set()) <= failed(report)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("cut", [300, 0.5])
def test_output_truncated(links_pair: tuple[bytes, bytes], level: str, cut: float) -> None:
    output = links_pair[1]
    keep = len(output) - int(cut) if cut >= 1 else int(len(output) * cut)
    report = run(links_pair[0], output[:keep], level)
    assert {"output_opens", "second_reader"} <= failed(report)


def test_a_selection_is_proved_page_by_page(text_pair: tuple[bytes, bytes]) -> None:
    """A mark on a page the spec leaves alone is caught by structure, in standard mode too."""
    spec = dataclasses.replace(SPEC, pages="1")
    report = run(text_pair[0], text_pair[1], "standard", spec)
    assert {"watermark_structure"} <= failed(report)




def test_a_proof_piece_that_dies_fails_closed(
    long_pair: tuple[bytes, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long documents are split across forked processes; one that dies (here: exits without an answer)
    leaves its pages unproved, and validation fails rather than trusting the pieces that answered."""
    parent = os.getpid()
    real = page_checks.prove_range

    def dies_in_child(pair: page_checks.Pair, first: int, stop: int) -> page_checks.RangeFindings:
        if os.getpid() != parent:
            os._exit(3)
        return real(pair, first, stop)

    monkeypatch.setattr(page_checks, "prove_range", dies_in_child)
    report = run(*long_pair, "standard")
    assert not report["ok"]
    mark = next(c for c in report["checks"] if c["name"] == "watermark_structure")  # type: ignore[attr-defined]
    assert mark["failures"][0] == "pages 1-250: structural checks did not complete"


@pytest.mark.parametrize("level", LEVELS)
def test_mark_laid_out_outside_the_visible_box(level: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A layout bug that puts the mark off the page fools the structural comparison (the validator
    rebuilds the form with the same builder) but not the once-per-geometry render of the mark alone."""
    import docfence.engines.vector as vector
    from docfence.engines.geometry import multiply

    real = vector.placements

    def off_page(*args: object) -> list[tuple[float, ...]]:
        return [multiply(m, (1.0, 0.0, 0.0, 1.0, 5000.0, 5000.0)) for m in real(*args)]  # type: ignore[arg-type]

    from docfence.engines import mark_pixels

    monkeypatch.setattr(vector, "placements", off_page)
    mark_pixels.coverage_mask.cache_clear()  # masks are cached per geometry: none from the real layout
    try:
        source = pdfs.many_pages(12)
        report = run(source, watermarked(source), level)
    finally:
        mark_pixels.coverage_mask.cache_clear()  # nor any of the broken layout's for later tests
    assert "watermark_in_visible_box" in failed(report)


def test_unbalanced_page_content_is_proved_by_pixels() -> None:
    """An extra Q in a page's own content could pop the wrapper's q and change how the mark is drawn:
    structure cannot prove that page, so standard mode renders it (and it passes: the mark shows)."""

    def unbalance(pdf: pikepdf.Pdf) -> None:
        own = pdf.pages[5].obj.Contents
        own.write(b"Q " + own.read_bytes())

    source = mutate(pdfs.many_pages(12), unbalance)
    report = run(source, watermarked(source), "standard")
    assert report["ok"], failed(report)
    rendered = next(c for c in report["checks"] if c["name"] == "watermark_rendered")  # type: ignore[attr-defined]
    assert rendered["why"]["page content q/Q balance not provable by structure"] == "6"
