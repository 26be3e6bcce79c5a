"""The watermark as a coverage mask for one page geometry at one pixel scale (rendered by pdfium from the
same vector layout), used to composite raster pages with Pillow and to know where to look when validating."""

from __future__ import annotations

import dataclasses
import functools
import io

import pikepdf
import pypdfium2 as pdfium
from PIL import Image, ImageOps

from docfence.core.policy import WatermarkSpec
from docfence.engines.geometry import PageGeometry


def _stamped_blank(geo: PageGeometry, spec: WatermarkSpec) -> bytes:
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
    solid = dataclasses.replace(spec, opacity=1.0, color=(0.0, 0.0, 0.0), layer="overlay")
    stamp_page(_Builder(pdf, solid), pdf.pages[0].obj, geo)
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


@functools.lru_cache(maxsize=32)
def coverage_mask(geo: PageGeometry, spec: WatermarkSpec, size: tuple[int, int]) -> Image.Image:
    """'L' image of `size` (the displayed page in pixels): 255 where the mark fully covers, 0 where absent."""
    doc = pdfium.PdfDocument(_stamped_blank(geo, spec))
    try:
        page = doc[0]
        width_pt, _ = page.get_size()
        bitmap = page.render(scale=size[0] / width_pt, grayscale=True, draw_annots=False)
        img = ImageOps.invert(bitmap.to_pil().convert("L"))
        page.close()
    finally:
        doc.close()
    return img if img.size == size else img.resize(size)


Layer = tuple[tuple[int, int, int, int], Image.Image, Image.Image]


@functools.lru_cache(maxsize=32)
def watermark_layer(geo: PageGeometry, spec: WatermarkSpec, size: tuple[int, int]) -> Layer:
    """(box, alpha scaled by opacity, solid colour) for compositing; pdfium runs on the calling thread."""
    mask = coverage_mask(geo, spec, size)
    box = mask.getbbox() or (0, 0, 1, 1)
    alpha = mask.crop(box).point(lambda v: round(v * spec.opacity))
    colour = Image.new("RGB", alpha.size, tuple(round(c * 255) for c in spec.color))
    return box, alpha, colour


def composite(img: Image.Image, layer: Layer) -> Image.Image:
    """Blend the watermark colour into `img` (RGB, in place) through the layer's alpha (Pillow only)."""
    box, alpha, colour = layer
    img.paste(colour, box, alpha)
    return img
