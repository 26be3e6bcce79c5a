"""A page's marks as pixels for one page geometry at one pixel scale (rendered by pdfium, on a transparent
page, from the same vector layout): a coverage mask (where the marks are, for the validator) and a coloured
layer with alpha (to composite raster pages with Pillow)."""

from __future__ import annotations

import dataclasses
import functools
import io

import pikepdf
import pypdfium2 as pdfium
from PIL import Image

from docfence.core.policy import WatermarkSpec
from docfence.engines.geometry import PageGeometry
from docfence.engines.marks import PageMark

PageMarks = tuple[PageMark, ...]


def page_marks(marks: PageMarks | WatermarkSpec) -> PageMarks:
    """A lone spec (earlier callers' single mark) as the one mark of a page, its text drawn literally."""
    if isinstance(marks, WatermarkSpec):
        return (PageMark(0, marks, marks.text, ((marks.text, False),)),)
    return marks


def _stamped_blank(geo: PageGeometry, marks: PageMarks) -> bytes:
    from docfence.engines.vector import _Builder, stamp_page

    pdf = pikepdf.new()
    page = pikepdf.Dictionary(
        Type=pikepdf.Name.Page,
        MediaBox=pikepdf.Array(list(geo.media)),
        CropBox=pikepdf.Array(list(geo.crop)),
        Rotate=geo.rotate,
        Resources=pikepdf.Dictionary(),
    )
    pdf.pages.append(pikepdf.Page(page))
    stamp_page(_Builder(pdf), pdf.pages[0].obj, geo, marks)
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def _render_rgba(geo: PageGeometry, marks: PageMarks, size: tuple[int, int], scale: float | None = None
                 ) -> Image.Image:
    """The marks alone on a transparent page of `size` pixels (RGBA, not premultiplied). With `scale`
    (the one the page itself was rendered at: the same pixel grid), a render a pixel off `size` is cut
    or padded at its far edges, never resampled: a bicubic resize of a full page at 150 DPI costs
    ~100 ms, more than the page's whole render."""
    doc = pdfium.PdfDocument(_stamped_blank(geo, marks))
    try:
        page = doc[0]
        width_pt, _ = page.get_size()
        fit = scale if scale is not None else size[0] / width_pt
        bitmap = page.render(scale=fit, fill_color=(0, 0, 0, 0), draw_annots=False)
        img: Image.Image = bitmap.to_pil().convert("RGBA")
        page.close()
    finally:
        doc.close()
    if img.size == size:
        return img
    if scale is not None and abs(img.size[0] - size[0]) <= 1 and abs(img.size[1] - size[1]) <= 1:
        return img.crop((0, 0, *size))  # outside the render: transparent
    return img.resize(size)


def _solid(mark: PageMark) -> PageMark:
    spec = dataclasses.replace(mark.spec, opacity=1.0, color=(0.0, 0.0, 0.0), layer="overlay")
    return dataclasses.replace(mark, spec=spec)


@functools.lru_cache(maxsize=32)
def coverage_mask(geo: PageGeometry, marks: PageMarks | WatermarkSpec, size: tuple[int, int]) -> Image.Image:
    """'L' image of `size` (the displayed page in pixels): 255 where the marks fully cover, 0 where absent
    (the alpha of the marks drawn at full opacity, so a white logo counts as much as black text)."""
    solid = tuple(_solid(m) for m in page_marks(marks))
    return _render_rgba(geo, solid, size).getchannel("A")


Piece = tuple[tuple[int, int], Image.Image, Image.Image]  # (top-left, alpha, colours) of one band
Layer = tuple[Piece, ...]
_BAND = 32  # rows per band: a diagonal mark's bands are narrow, so compositing skips most of the page


@functools.lru_cache(maxsize=32)
def watermark_layer(
    geo: PageGeometry, marks: PageMarks | WatermarkSpec, size: tuple[int, int], scale: float | None = None
) -> Layer:
    """Bands of (top-left, alpha with each mark's opacity, colours), each cut to where its marks have
    ink, for compositing onto a page of `size` pixels rendered at `scale`; pdfium runs on the calling
    thread. Cached per (geometry, marks with their page's text): static marks render once per geometry."""
    rgba = _render_rgba(geo, page_marks(marks), size, scale)
    alpha, colour = rgba.getchannel("A"), rgba.convert("RGB")
    pieces: list[Piece] = []
    for top in range(0, size[1], _BAND):
        band = (0, top, size[0], min(top + _BAND, size[1]))
        ink = alpha.crop(band).getbbox()
        if ink is not None:
            box = (ink[0], top + ink[1], ink[2], top + ink[3])
            pieces.append(((box[0], box[1]), alpha.crop(box), colour.crop(box)))
    return tuple(pieces)


def composite(img: Image.Image, layer: Layer) -> Image.Image:
    """Blend the marks' colours into `img` (RGB, in place) through the layer's alpha (Pillow only)."""
    for at, alpha, colour in layer:
        img.paste(colour, at, alpha)
    return img
