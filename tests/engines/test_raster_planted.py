"""Planted defects in raster outputs: each must fail validation at the standard and the exhaustive level,
and each test names the check that must catch it. The defects on a page outside the sample guard the
shortcut of engines/raster_proof.py: the output side is decoded from the page's image only when
structure proves the page shows exactly that image, in exactly the form the engine writes. The input side
is the validator's own render of every input page, so an engine that renders a page wrongly is caught
on any page. A palette that moves the page's colours (black shown brown, a saturated colour gray) fails
the colour proof, which names the page and its ΔE2000 figure."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

import pikepdf
import pytest
from PIL import Image

from docfence.core.errors import ValidationFailed
from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import pixel_proof, raster, raster_proof, watermark_document
from docfence.engines.marks import MarkSet
from docfence.engines.preflight import preflight
from docfence.engines.raster import watermark_raster
from docfence.engines.validate import validate

POLICY = JobPolicy(mode=Mode.RASTER, dpi=72, watermark=WatermarkSpec(text="CONFIDENTIAL", opacity=0.3))
PAGES = 6
MIDDLE = 3  # 0-based: neither the first nor the last page, so outside the sample of one-geometry files
WAYS = ("standard", "exhaustive")
Made = tuple[bytes, bytes, bytes]


@pytest.fixture(scope="module")
def made() -> Made:
    """(input, output, an output marked on page 1 only)."""
    data = shapes()
    output = watermark_raster(data, preflight(data, POLICY), POLICY)
    bare = JobPolicy(mode=Mode.RASTER, dpi=72, watermark=WatermarkSpec(text="CONFIDENTIAL", pages="1"))
    unmarked = watermark_raster(data, preflight(data, bare), bare)
    return data, output, unmarked


def _validate(made: Made, output: bytes, way: str, policy: JobPolicy = POLICY) -> set[str]:
    report = validate(made[0], output, MarkSet.of(policy), mode="raster", dpi=policy.dpi, level=way)
    return {c["name"] for c in report["checks"] if not c["ok"]}


def shapes(count: int = PAGES) -> bytes:
    """`count` pages that differ visibly at the proof's ~110 px: each a large dark block in its own place
    and colour (many_pages' pages differ only by a page number)."""
    pdf = pikepdf.new()
    for n in range(count):
        x, y = 40 + (n % 2) * 260, 60 + (n % 3) * 240
        colour = ("0 0 0.6", "0.6 0 0", "0 0.4 0")[n % 3]
        content = f"{colour} rg {x} {y} 255 230 re f 0 g 40 {750 - n * 100} 515 40 re f\n".encode()
        page = pikepdf.Dictionary(Type=pikepdf.Name.Page, MediaBox=pikepdf.Array([0, 0, 595, 842]),
                                  Contents=pdf.make_stream(content))
        pdf.pages.append(pikepdf.Page(page))
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def _edit(output: bytes, change: Callable[[pikepdf.Pdf, pikepdf.Dictionary], None]) -> bytes:
    with pikepdf.open(io.BytesIO(output)) as pdf:
        change(pdf, pdf.pages[MIDDLE].obj)
        buf = io.BytesIO()
        pdf.save(buf)
    return buf.getvalue()


def _image(page: pikepdf.Dictionary) -> pikepdf.Stream:
    return page.Resources.XObject.DfIm  # type: ignore[no-any-return]


@pytest.mark.parametrize("way", WAYS)
def test_sound_output_passes(made: Made, way: str) -> None:
    assert _validate(made, made[1], way) == set()


@pytest.mark.parametrize("way", WAYS)
def test_mark_missing_on_one_page(made: Made, way: str) -> None:
    bare = pikepdf.open(io.BytesIO(made[2]))

    def unmark(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        page.Resources.XObject.DfIm = pdf.copy_foreign(_image(bare.pages[MIDDLE].obj))

    assert "watermark_rendered" in _validate(made, _edit(made[1], unmark), way)


@pytest.mark.parametrize("way", WAYS)
def test_opaque_cover_drawn_over_the_image(
    made: Made, way: str
) -> None:
    def cover(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        page.Contents.write(page.Contents.read_bytes() + b"q 1 g 0 0 2000 2000 re f Q\n")

    assert "watermark_rendered" in _validate(made, _edit(made[1], cover), way)


@pytest.mark.parametrize("way", WAYS)
def test_image_drawn_at_half_size(made: Made, way: str) -> None:
    def shrink(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        page.Contents.write(b"q 0.5 0 0 0.5 0 0 cm " + page.Contents.read_bytes() + b"Q\n")

    assert "watermark_rendered" in _validate(made, _edit(made[1], shrink), way)


@pytest.mark.parametrize("way", WAYS)
def test_image_inverted_by_a_decode_array(
    made: Made, way: str
) -> None:
    def invert(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        image = _image(page)
        image.Decode = pikepdf.Array([15, 0] if "/Indexed" in str(image.ColorSpace) else [1, 0])

    assert "watermark_rendered" in _validate(made, _edit(made[1], invert), way)


@pytest.mark.parametrize("way", WAYS)
def test_opaque_annotation_over_the_page(
    made: Made, way: str
) -> None:
    def annotate(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        box = [float(v) for v in page.MediaBox]
        look = pdf.make_stream(b"1 g 0 0 2000 2000 re f\n")
        look.Type, look.Subtype, look.BBox = pikepdf.Name.XObject, pikepdf.Name.Form, pikepdf.Array(box)
        annot = pikepdf.Dictionary(Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Square, Rect=box,
                                   AP=pikepdf.Dictionary(N=look))
        page.Annots = pdf.make_indirect(pikepdf.Array([pdf.make_indirect(annot)]))

    assert "watermark_rendered" in _validate(made, _edit(made[1], annotate), way)


@pytest.mark.parametrize("way", WAYS)
def test_image_data_damaged(made: Made, way: str) -> None:
    """A cut Flate stream: a renderer shows what it could inflate (here, nearly all of it); the proof
    that decodes the image refuses it."""

    def damage(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        image = _image(page)
        raw = image.read_raw_bytes()
        image.write(raw[: len(raw) - 8], filter=image.Filter, decode_parms=image.get("/DecodeParms"))

    assert "watermark_rendered" in _validate(made, _edit(made[1], damage), way)


@pytest.mark.parametrize("way", WAYS)
def test_page_box_changed(made: Made, way: str) -> None:
    def grow(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        page.MediaBox = pikepdf.Array([0, 0, 400, 400])

    assert "visible_size" in _validate(made, _edit(made[1], grow), way)


@pytest.mark.parametrize("way", WAYS)
def test_output_truncated(made: Made, way: str) -> None:
    cut = made[1][: len(made[1]) * 2 // 3]
    assert _validate(made, cut, way) & {"output_opens", "page_count", "second_reader"}


@pytest.mark.parametrize("way", WAYS)
def test_jpeg_colour_transform_switched_off(way: str) -> None:
    """/DecodeParms <</ColorTransform 0>> on a JPEG: pdfium shows the YCbCr samples as RGB (white turns
    pink); the proof must not decode the JPEG as if the entry were not there."""
    policy = JobPolicy(mode=Mode.RASTER, dpi=72, raster_encoding="jpeg",
                       watermark=WatermarkSpec(text="CONFIDENTIAL", opacity=0.3))
    data = shapes()
    output = watermark_raster(data, preflight(data, policy), policy)

    def untransform(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        image = _image(page)
        assert image.Filter == pikepdf.Name.DCTDecode
        image.DecodeParms = pikepdf.Dictionary(ColorTransform=0)

    made = (data, output, b"")
    assert _validate(made, output, way, policy) == set()
    assert "watermark_rendered" in _validate(made, _edit(output, untransform), way, policy)


@pytest.mark.parametrize("encoding", ["png", "auto", "jpeg"])
def test_decoded_only_in_the_engines_own_form(encoding: str) -> None:
    """Each image the engine writes decodes (PNG predictors included); the same image with its
    /DecodeParms changed in any way is left to pdfium."""
    policy = JobPolicy(mode=Mode.RASTER, dpi=72, raster_encoding=encoding, watermark=POLICY.watermark)
    data = shapes(2)
    with pikepdf.open(io.BytesIO(watermark_raster(data, preflight(data, policy), policy))) as pdf:
        image = _image(pdf.pages[0].obj)
        assert raster_proof.decode(image) is not None
        parms = image.get("/DecodeParms")
        changes = [pikepdf.Dictionary(Predictor=15, Colors=1, BitsPerComponent=8, Columns=1)]
        if parms is not None:
            width = int(parms.Columns)
            changes = [pikepdf.Dictionary({**dict(parms.items()), "/Columns": width + 1}),
                       pikepdf.Dictionary({**dict(parms.items()), "/Predictor": 12}),
                       pikepdf.Dictionary({**dict(parms.items()), "/EarlyChange": 0})]
        for changed in changes:
            image.DecodeParms = changed
            assert raster_proof.decode(image) is None, changed


def _faulty_render(fault: Callable[[int, Image.Image, Image.Image | None], Image.Image]) -> Any:
    """raster._render with `fault(index, image, previous page's image)` applied to every page."""
    real = raster._render
    previous: dict[str, Image.Image] = {}

    def render(doc: Any, index: int, dpi: int) -> Image.Image:
        img = fault(index, real(doc, index, dpi), previous.get("img"))
        previous["img"] = img.copy()
        return img

    return render


@pytest.mark.parametrize("fault", ["blank", "stale"])
def test_engine_render_fault_outside_the_sample(fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine renders page 4 of 6 blank, or shows page 3's bitmap again (not the first or last page:
    outside the sample): the validator's own render of the input catches it."""
    data = shapes()

    def faulty(index: int, img: Image.Image, previous: Image.Image | None) -> Image.Image:
        if index != MIDDLE:
            return img
        if fault == "blank":
            return Image.new("RGB", img.size, "white")
        assert previous is not None and previous.size == img.size
        return previous.copy()

    monkeypatch.setattr(raster, "_PARALLEL_FROM_PAGES", 10**6)  # one range, in this process
    monkeypatch.setattr(raster, "_render", _faulty_render(faulty))
    with pytest.raises(ValidationFailed) as failed:
        watermark_document(data, POLICY)
    report = failed.value.report  # type: ignore[attr-defined]
    bad = [c for c in report["checks"] if not c["ok"]]
    assert [c["name"] for c in bad] == ["watermark_rendered"]
    assert all(f.startswith(f"page {MIDDLE + 1}:") for f in bad[0]["failures"]), bad


def test_engine_fault_harness_passes_a_sound_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same path with no fault planted validates (so the tests above fail for the fault alone)."""
    monkeypatch.setattr(raster, "_PARALLEL_FROM_PAGES", 10**6)
    monkeypatch.setattr(raster, "_render", _faulty_render(lambda index, img, previous: img))
    assert watermark_document(shapes(), POLICY).validation["ok"]


@pytest.mark.parametrize("way", WAYS)
def test_output_showing_the_previous_page(made: Made, way: str) -> None:
    """Page 4 of the output shows page 3's image (decoded, outside the sample): compared with the
    validator's own render of input page 4, it is caught."""

    def stale(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        page.Resources.XObject.DfIm = _image(pdf.pages[MIDDLE - 1].obj)

    assert "watermark_rendered" in _validate(made, _edit(made[1], stale), way)


def test_pdfium_renders_the_output_only_on_the_sample_when_structure_proves_the_rest(
    made: Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered: list[str] = []
    for name in ("render_fine", "render_at_dpi", "render_like"):
        real = getattr(pixel_proof, name)

        def counted(*args: object, _real: Callable[..., Any] = real, _name: str = name) -> Image.Image:
            rendered.append(_name)
            return _real(*args)

        monkeypatch.setattr(raster_proof, name, counted)
    assert _validate(made, made[1], "standard") == set()
    # every input page once (A4 at 72 DPI: the colour proof's grid is the comparison render's); the
    # output of the first and the last page only
    assert sorted(rendered) == ["render_fine"] * PAGES + ["render_like"] * 2


_COLOUR_DETAIL = re.compile(r"page 4: (?:[^;]*; )*colours (?:outside the mark )?differ: "
                            r"\u0394E2000 (\d+\.\d) at the 99th percentile \(bound 10\)")


def _recoloured(page: pikepdf.Dictionary, change: Callable[[tuple[int, ...]], tuple[int, ...]]) -> None:
    """Each entry of the page image's /Indexed palette replaced by change(entry)."""
    image = _image(page)
    space = image.ColorSpace
    assert isinstance(space, pikepdf.Array) and space[0] == pikepdf.Name.Indexed, space
    lookup = bytes(space[3])
    entries = [change(tuple(lookup[i : i + 3])) for i in range(0, len(lookup), 3)]
    image.ColorSpace = pikepdf.Array([space[0], space[1], space[2], pikepdf.String(bytes(sum(entries, ())))])


def _brown(entry: tuple[int, ...]) -> tuple[int, ...]:
    return (108, 58, 58) if max(entry) <= 40 else entry


def _colour_figures(made: Made, output: bytes, way: str, policy: JobPolicy = POLICY) -> list[float]:
    """The ΔE figures of the colour failures the validator reports for page 4 (MIDDLE)."""
    report = validate(made[0], output, MarkSet.of(policy), mode="raster", dpi=policy.dpi, level=way)
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert "watermark_rendered" in failed, report
    found = [_COLOUR_DETAIL.search(d) for d in failed["watermark_rendered"]["details"]]
    return [float(m.group(1)) for m in found if m]


@pytest.mark.parametrize("way", WAYS)
def test_palette_that_turns_black_brown(made: Made, way: str) -> None:
    """The page's black (its bar, ~4 % of the page: too little to move the blurred mean) shown dark brown
    (108, 58, 58), as a palette the mark's red took showed it: the colour proof names the page and the
    figure."""
    figures = _colour_figures(made, _edit(made[1], lambda pdf, page: _recoloured(page, _brown)), way)
    assert figures and all(f > 20 for f in figures), figures


@pytest.mark.parametrize("way", WAYS)
def test_palette_that_turns_a_saturated_colour_gray(made: Made, way: str) -> None:
    """The page's dark blue block shown in a gray of about its lightness."""

    def gray(entry: tuple[int, ...]) -> tuple[int, ...]:
        return (40, 40, 40) if entry[2] - max(entry[:2]) > 60 else entry

    figures = _colour_figures(made, _edit(made[1], lambda pdf, page: _recoloured(page, gray)), way)
    assert figures and all(f > 10 for f in figures), figures


def test_black_turned_brown_where_pdfium_shows_the_page(made: Made) -> None:
    """The same defect on a page whose structure the proof does not accept (a second, unused image
    resource): its colours are taken from pdfium's render of the output, and still fail."""

    def brown_unproven(pdf: pikepdf.Pdf, page: pikepdf.Dictionary) -> None:
        _recoloured(page, _brown)
        page.Resources.XObject.Spare = _image(pdf.pages[0].obj)

    assert _colour_figures(made, _edit(made[1], brown_unproven), "standard")


def test_black_turned_brown_above_the_colour_dpi() -> None:
    """At 300 DPI both sides are area-averaged to 150 DPI first; a brown black still fails there."""
    pdf = pikepdf.new()
    content = b"0 g 20 20 160 40 re f 0 0 0.6 rg 20 100 160 60 re f\n"
    for _ in range(PAGES):
        page = pikepdf.Dictionary(Type=pikepdf.Name.Page, MediaBox=pikepdf.Array([0, 0, 200, 200]),
                                  Contents=pdf.make_stream(content))
        pdf.pages.append(pikepdf.Page(page))
    buf = io.BytesIO()
    pdf.save(buf)
    policy = JobPolicy(mode=Mode.RASTER, dpi=300, watermark=WatermarkSpec(text="CONFIDENTIAL", pages="1"))
    data = buf.getvalue()
    output = watermark_raster(data, preflight(data, policy), policy)
    made = (data, output, b"")
    assert _validate(made, output, "standard", policy) == set()
    assert _colour_figures(made, _edit(output, lambda pdf, page: _recoloured(page, _brown)), "standard",
                           policy)
