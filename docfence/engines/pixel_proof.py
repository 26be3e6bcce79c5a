"""Pixel evidence for the validator: low-resolution renders of an input and an output page and what their
difference says (the mark visible where it is and nowhere else; a raster page like its source, its colours
kept)."""

from __future__ import annotations

import pypdfium2 as pdfium
from PIL import Image, ImageChops, ImageFilter, ImageOps, ImageStat

RENDER_PX = 110.0  # longest side of the low-resolution comparison render
_RASTER_NOISE = 8.0  # mean difference a re-rasterised page may show from resampling alone


def _small_scale(size: tuple[float, float]) -> float:
    w, h = size
    return max(RENDER_PX / max(w, h, 1.0), 1.0 if min(w, h) < 200 else 0.0)


def proof_scale(size: tuple[float, float], dpi: int) -> tuple[float, int]:
    """(render scale, reduction factor) of a raster comparison render of a page of `size` points."""
    scale = _small_scale(size)
    fine = max(dpi / 72.0, scale)
    return fine, max(1, round(fine / scale))


def render(page: pdfium.PdfPage, dpi: int | None = None) -> Image.Image:
    """Low-resolution render. For raster outputs, both sides are rendered at the raster DPI and then
    area-averaged, so hairlines (one device pixel at any scale) weigh the same in input and output."""
    if dpi is None:
        return _render_at(page, _small_scale(page.get_size()))
    _, factor = proof_scale(page.get_size(), dpi)
    img = render_fine(page, dpi)
    return img.reduce(factor) if factor > 1 else img


def render_fine(page: pdfium.PdfPage, dpi: int) -> Image.Image:
    """The raster comparison render before its reduction (at the raster DPI on pages of 200 pt and more):
    the colour proof compares pixels at this resolution."""
    return _render_at(page, proof_scale(page.get_size(), dpi)[0])


def render_at_dpi(page: pdfium.PdfPage, dpi: int) -> Image.Image:
    """The page on the raster engine's pixel grid (the same size its image has)."""
    return _render_at(page, dpi / 72.0)


def _render_at(page: pdfium.PdfPage, scale: float) -> Image.Image:
    img: Image.Image = page.render(scale=scale, draw_annots=True, may_draw_forms=True).to_pil().convert("RGB")
    return img


def render_like(page: pdfium.PdfPage, size: tuple[int, int]) -> Image.Image:
    """An image-only raster page, rendered straight at the comparison size (pdfium area-samples images)."""
    scale = size[0] / max(page.get_size()[0], 1.0)
    img: Image.Image = page.render(scale=scale, draw_annots=True).to_pil().convert("RGB")
    return img if img.size == size else img.resize(size)


def changed_pixels(before: Image.Image, after: Image.Image, threshold: int) -> int:
    if before.size != after.size:
        after = after.resize(before.size)
    diff = ImageChops.difference(before, after).convert("L")
    return int(diff.point(lambda v: 255 if v > threshold else 0).histogram()[255])


def vector_pixel_problem(
    before: Image.Image, after: Image.Image, selected: bool, mask: Image.Image | None = None
) -> str | None:
    """Vector: a selected page must visibly change where the mark is (`mask`, its coverage at this size)
    and nowhere else (so an opaque cover that hides mark and page alike is caught); any other page must
    render identically."""
    if not selected or mask is None:
        changed = changed_pixels(before, after, 12)
        if selected and changed < 3:
            return "watermark not visible when rendered"
        if not selected and changed > 0:
            return "unselected page looks different"
        return None
    near = mask.point(lambda v: 255 if v > 8 else 0).filter(ImageFilter.MaxFilter(5))
    diff = ImageChops.difference(before, after.resize(before.size) if after.size != before.size else after)
    moved = diff.convert("L").point(lambda v: 255 if v > 12 else 0)
    inside = ImageChops.multiply(moved, near).histogram()[255]
    outside = ImageChops.multiply(moved, ImageOps.invert(near)).histogram()[255]
    if inside < 3:
        return "watermark not visible when rendered"
    if outside > max(2, before.size[0] * before.size[1] // 500):
        return "page outside the watermark looks different"
    return None


def _diff(before: Image.Image, after: Image.Image) -> Image.Image:
    """Blurred difference: resampling of a re-rasterised page averages out, a watermark does not."""
    if before.size != after.size:
        after = after.resize(before.size)
    blur = ImageFilter.BoxBlur(2)
    return ImageChops.difference(before.filter(blur), after.filter(blur)).convert("L")


def raster_pixel_problem(
    before: Image.Image, after: Image.Image, mask: Image.Image, opacity: float
) -> str | None:
    """Raster: inside the marks' area the page must change clearly more than outside it (`opacity`: the
    faintest of the page's marks)."""
    region = mask.point(lambda v: 255 if v > 128 else 0)
    if region.getbbox() is None:
        return "watermark area is empty at validation resolution"
    diff = _diff(before, after)
    inside = ImageStat.Stat(diff, region).mean[0]
    outside_mask = ImageOps.invert(mask.point(lambda v: 255 if v > 8 else 0))
    outside = ImageStat.Stat(diff, outside_mask).mean[0] if outside_mask.getbbox() else 0.0
    if inside - outside < max(3.0, 24.0 * opacity):
        return "watermark not visible when rendered"
    if outside > _RASTER_NOISE:
        return "page outside the watermark looks different"
    return None


def colour_problem(before: Image.Image, after: Image.Image, keep: Image.Image | None) -> str | None:
    """Raster: the page's colours where `keep` is set (outside the marks; None: everywhere) within
    COLOUR_BOUND_DE99 of the source render at its 99th percentile (colour_difference.py says why that
    bound), on the pixels of colour_difference.on_grid. An output page with no colour anywhere (a gray
    encoding: the raster policy may ask for one) is held to the source's lightness instead, as the
    validator cannot tell that policy from auto."""
    # imported here, not with the module: numpy costs ~0.1 s of CPU to import, and only raster pages
    # are judged by colour (a vector job, and the command line's zygote, never load it)
    from docfence.engines.colour_difference import (
        COLOUR_BOUND_DE99,
        PERCENTILE,
        on_grid,
        percentile_difference,
    )

    if after.size != before.size:
        after = after.resize(before.size)
    source, shown = on_grid(before), on_grid(after)
    if _neutral(shown) and _neutral(after):  # the grid first: a colour page is known at a quarter
        source = source.convert("L").convert("RGB")
    found = percentile_difference(source, shown, on_grid(keep) if keep is not None else None)
    if found > COLOUR_BOUND_DE99:
        where = "outside the mark " if keep is not None else ""
        return (f"colours {where}differ: \u0394E2000 {found:.1f} at the {PERCENTILE:g}th percentile "
                f"(bound {COLOUR_BOUND_DE99:g})")
    return None


def _neutral(img: Image.Image) -> bool:
    red, green, blue = img.split()
    same = ImageChops.difference(red, green).getbbox() is None
    return same and ImageChops.difference(green, blue).getbbox() is None


def raster_unselected_problem(before: Image.Image, after: Image.Image) -> str | None:
    if ImageStat.Stat(_diff(before, after)).mean[0] > _RASTER_NOISE:
        return "unselected page looks different"
    return None


def page_text(page: pdfium.PdfPage) -> str:
    textpage = page.get_textpage()
    try:
        return str(textpage.get_text_range())
    finally:
        textpage.close()
