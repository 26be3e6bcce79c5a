"""Planted defects in raster outputs: each must fail validation, with and without the engine's renders of
the input (`references`) and at the exhaustive level, and each test names the check that must catch it.
The defects on a page outside the sample guard the shortcuts of engines/raster_proof.py: the output side
is decoded from the page's image only when structure proves the page shows exactly that image, and the
engine's renders of the input are cross-checked on the sample."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pikepdf
import pytest
from PIL import Image

from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import pixel_proof, raster_proof
from docfence.engines.marks import MarkSet
from docfence.engines.preflight import preflight
from docfence.engines.raster import watermark_raster
from docfence.engines.validate import validate
from docfence.samples import pdfs

POLICY = JobPolicy(mode=Mode.RASTER, dpi=72, watermark=WatermarkSpec(text="CONFIDENTIAL", opacity=0.3))
PAGES = 6
MIDDLE = 3  # 0-based: neither the first nor the last page, so outside the sample of one-geometry files
WAYS = ("references", "no_references", "exhaustive")
Made = tuple[bytes, bytes, list[Image.Image | None], bytes]


@pytest.fixture(scope="module")
def made() -> Made:
    """(input, output, the engine's renders of the input, an output marked on page 1 only)."""
    data = pdfs.many_pages(PAGES)
    references: list[Image.Image | None] = []
    output = watermark_raster(data, preflight(data, POLICY), POLICY, references)
    bare = JobPolicy(mode=Mode.RASTER, dpi=72, watermark=WatermarkSpec(text="CONFIDENTIAL", pages="1"))
    unmarked = watermark_raster(data, preflight(data, bare), bare)
    return data, output, references, unmarked


def _validate(made: Made, output: bytes, way: str,
              references: list[Image.Image | None] | None = None) -> set[str]:
    data, _, refs, _ = made
    report = validate(
        data, output, MarkSet.of(POLICY), mode="raster", dpi=72,
        level="exhaustive" if way == "exhaustive" else "standard",
        references=(references or refs) if way == "references" else None,
    )
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
    bare = pikepdf.open(io.BytesIO(made[3]))

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


@pytest.mark.parametrize("way", ["standard", "exhaustive"])
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

    def failing(pdf: bytes) -> set[str]:
        report = validate(data, pdf, MarkSet.of(policy), mode="raster", dpi=72,
                          level="exhaustive" if way == "exhaustive" else "standard")
        return {c["name"] for c in report["checks"] if not c["ok"]}

    assert failing(output) == set()
    assert "watermark_rendered" in failing(_edit(output, untransform))


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


def test_engine_render_of_the_wrong_page_is_caught_on_the_sample(
    made: Made,
) -> None:
    """The engine's renders stand in for the validator's own only where they agree on the sample: an
    engine that rendered page 2 for page 1, in its image and its reference alike, is caught there."""
    _, output, refs, _ = made
    with pikepdf.open(io.BytesIO(output)) as pdf:
        pdf.pages[0].obj.Resources.XObject.DfIm = pdf.pages[1].obj.Resources.XObject.DfIm
        buf = io.BytesIO()
        pdf.save(buf)
    wrong = [refs[1], *refs[1:]]
    assert "watermark_rendered" in _validate(made, buf.getvalue(), "references", wrong)


def test_pdfium_renders_only_the_sample_when_structure_proves_the_rest(
    made: Made, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered: list[str] = []
    for name in ("render", "render_like"):
        real = getattr(pixel_proof, name)

        def counted(*args: object, _real: Callable[..., Any] = real, _name: str = name) -> Image.Image:
            rendered.append(_name)
            return _real(*args)

        monkeypatch.setattr(raster_proof, name, counted)
    assert _validate(made, made[1], "references") == set()
    assert sorted(rendered) == ["render", "render", "render_like", "render_like"]  # first and last page
