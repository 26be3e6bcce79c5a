"""The raster pixel proof's two sides of a page: the input side always pdfium's render of the source
page (independent of the engine), the output side decoded straight from the page's one image once
structure proves the page shows exactly that image edge to edge; pdfium renders the output page where
structure cannot prove that, and on a sample of pages, to cross-check the decoding. The colour proof
compares the same two sides at the raster DPI (at most COLOUR_DPI) outside the marks."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pikepdf
import pypdfium2 as pdfium
from PIL import Image, ImageFilter, ImageOps

from docfence.engines.geometry import PageGeometry
from docfence.engines.mark_pixels import PageMarks, coverage_mask
from docfence.engines.pixel_proof import (
    colour_problem,
    proof_scale,
    raster_pixel_problem,
    raster_unselected_problem,
    render_at_dpi,
    render_fine,
    render_like,
)

_PAGE_KEYS = {"/Type", "/MediaBox", "/Resources", "/Contents", "/Parent"}
_IMAGE_KEYS = {"/Type", "/Subtype", "/Width", "/Height", "/BitsPerComponent", "/ColorSpace", "/Filter",
               "/DecodeParms", "/Length"}


@dataclass(frozen=True)
class RasterSides:
    """Per-document inputs of the raster proof. `sample`: pages whose output pdfium renders even where
    the page's image decodes, to cross-check the decoding."""

    out_pages: list[pikepdf.Dictionary]
    out_geos: list[PageGeometry]
    sample: frozenset[int]
    dpi: int

    def method(self) -> str:
        if len(self.sample) == len(self.out_pages):
            return "pdfium renders both sides of every page (the output's decoded images cross-checked)"
        return ("input side: pdfium render of every input page; output side: the page's image decoded "
                "where structure proves the page shows only it edge to edge, else pdfium render; pdfium "
                "renders the output of the sample too")


def shown_image(page: pikepdf.Dictionary, geo: PageGeometry) -> pikepdf.Stream | None:
    """The image the page shows edge to edge and nothing else, proved by structure; else None. Proved:
    no entries beyond type, box, resources and contents (no annotations, groups, rotation or crop, not
    even inherited); one content stream that is exactly `q W 0 0 H 0 0 cm /Name Do Q` for the page's
    box; one resource, that image, without masks, decode arrays or optional-content entries."""
    w, h = geo.display_size
    if set(page.keys()) - _PAGE_KEYS or geo.rotate or geo.crop != geo.media or geo.media[:2] != (0, 0):
        return None
    if "/Resources" not in page:  # its own resources: nothing inherited from the page tree counts
        return None
    contents, resources = page.get("/Contents"), page.Resources
    if not isinstance(contents, pikepdf.Stream) or set(resources.keys()) != {"/XObject"}:
        return None
    xobjects = resources.XObject
    if not isinstance(xobjects, pikepdf.Dictionary) or len(xobjects.keys()) != 1:
        return None
    name = next(iter(xobjects.keys()))
    try:
        ops = [(list(item.operands), str(item.operator)) for item in pikepdf.parse_content_stream(contents)]
    except pikepdf.PdfError:
        return None
    if [op for _, op in ops] != ["q", "cm", "Do", "Q"] or ops[2][0] != [pikepdf.Name(name)]:
        return None
    matrix = [float(v) for v in ops[1][0]]
    if len(matrix) != 6 or any(abs(a - b) > 1e-3 for a, b in zip(matrix, (w, 0, 0, h, 0, 0), strict=True)):
        return None
    image = xobjects[name]
    if not isinstance(image, pikepdf.Stream) or set(image.keys()) - _IMAGE_KEYS:
        return None
    return image if image.get("/Subtype") == pikepdf.Name.Image else None


class Undecodable(Exception):
    """The page's image is of a form decode() reads, but its data does not decode to its size."""


def decode(image: pikepdf.Stream) -> Image.Image | None:
    """The image's pixels as RGB, decoded by libqpdf (Flate, predictors) or Pillow (JPEG), for the forms
    the raster engine writes; None for any other form (pdfium then renders the page). Raises
    Undecodable when the data is damaged or of the wrong length, which a renderer would paper over."""
    try:
        width, height, bits = int(image.Width), int(image.Height), int(image.BitsPerComponent)
        space, kind = image.ColorSpace, image.Filter
        if not _engine_parms(image, kind, space, bits, width):
            return None
        if kind == pikepdf.Name.DCTDecode:
            if bits != 8:
                return None
            img = Image.open(io.BytesIO(image.read_raw_bytes()))
            expected = {"/DeviceGray": "L", "/DeviceRGB": "RGB"}.get(str(space))
            if img.mode != expected:
                return None
            if img.size != (width, height):
                raise Undecodable("the JPEG's size is not the image's")
            return img.convert("RGB")
        if kind != pikepdf.Name.FlateDecode:
            return None
        data = image.read_bytes()
        if isinstance(space, pikepdf.Array):
            return _indexed(space, width, height, bits, data)
        mode = {("/DeviceGray", 8): "L", ("/DeviceRGB", 8): "RGB"}.get((str(space), bits))
        if mode is None:
            return None
        if len(data) != width * height * len(mode):
            raise Undecodable("the image's data is not its size")
        return Image.frombytes(mode, (width, height), data).convert("RGB")
    except (pikepdf.PdfError, OSError) as exc:  # a damaged stream (qpdf) or JPEG (Pillow)
        raise Undecodable(f"the image does not decode ({type(exc).__name__})") from exc
    except (AttributeError, ValueError, TypeError):  # entries of unexpected types: not our form
        return None


def _engine_parms(image: pikepdf.Stream, kind: object, space: object, bits: int, width: int) -> bool:
    """The image's /DecodeParms are exactly what the raster engine writes for its form: none on a JPEG
    (a /ColorTransform changes what readers show) nor on plain Flate rows; on PNG-predicted Flate rows
    exactly Predictor 15 with the image's own colours, depth and width. Anything else: pdfium decides."""
    if "/DecodeParms" not in image:
        return True
    parms = image.DecodeParms
    if kind != pikepdf.Name.FlateDecode or not isinstance(parms, pikepdf.Dictionary):
        return False
    colours = 3 if space == pikepdf.Name.DeviceRGB else 1
    expected = {"/Predictor": 15, "/Colors": colours, "/BitsPerComponent": bits, "/Columns": width}
    if set(parms.keys()) != set(expected):
        return False
    values = [parms[k] for k in expected]
    integers = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    return integers and values == list(expected.values())


def _indexed(space: pikepdf.Array, width: int, height: int, bits: int, data: bytes) -> Image.Image | None:
    if len(space) != 4 or space[0] != pikepdf.Name.Indexed or space[1] != pikepdf.Name.DeviceRGB:
        return None
    lookup, hival = bytes(space[3]), int(space[2])
    rawmode = {4: "P;4", 8: "P"}.get(bits)
    row = (width * bits + 7) // 8
    if rawmode is None or len(lookup) < 3 * (hival + 1) or hival > 255:
        return None
    if len(data) != row * height:
        raise Undecodable("the image's data is not its size")
    img = Image.frombytes("P", (width, height), data, "raw", rawmode)
    if hival + 1 < 1 << bits:  # some index has no colour (the engine fills the table): check the pixels
        used = img.getextrema()[1]
        if not isinstance(used, int) or used > hival:  # let pdfium decide what such a pixel shows
            return None
    img.putpalette(lookup[: 3 * (hival + 1)])
    return img.convert("RGB")


@dataclass(frozen=True)
class PageSides:
    """Both sides of one raster page: at the comparison size (`before`, `after`), at the colour proof's
    (`fine_before`, `fine_after`: the output's own pixels and the source rendered on the same grid, at
    the raster DPI, area-averaged down to at most COLOUR_DPI), and what the cross-check of the output's
    decoding found."""

    before: Image.Image
    after: Image.Image
    fine_before: Image.Image
    fine_after: Image.Image
    problems: list[str]


#: The colour proof compares pixels at the raster DPI up to this one (the default raster DPI); a finer
#: page is area-averaged down to it by a whole factor on both sides: above it the formula's cost grows
#: with the square of the DPI, and a colour that moved shows at 150 DPI as well.
COLOUR_DPI = 150


def sides(ctx: RasterSides, index: int, src: pdfium.PdfPage, out: pdfium.PdfPage) -> PageSides:
    """Both sides of page `index` for the raster pixel proof and its colour proof."""
    scale, factor = proof_scale(src.get_size(), ctx.dpi)
    fine = render_fine(src, ctx.dpi)
    before = fine.reduce(factor) if factor > 1 else fine
    exact = fine if scale == ctx.dpi / 72.0 else render_at_dpi(src, ctx.dpi)  # else a page under 200 pt
    problems: list[str] = []
    decoded = None
    image = shown_image(ctx.out_pages[index], ctx.out_geos[index])
    try:
        full = decode(image) if image is not None else None
    except Undecodable as exc:
        full = None
        problems.append(f"the page's image: {exc}")
    if full is not None:
        decoded = full.reduce(factor) if factor > 1 else full
        decoded = decoded if decoded.size == before.size else None
    shown = None
    if decoded is not None and index not in ctx.sample:
        after = decoded
    else:  # drawn at the input side's scale and reduced alike: pdfium's own downscale of an image is
        shown = render_like(out, fine.size)  # no area average, and differs from one on fine detail
        after = shown.reduce(factor) if factor > 1 else shown
        if decoded is not None and raster_unselected_problem(after, decoded):
            problems.append("pdfium shows the page image differently than it decodes")
    if full is None or full.size != exact.size:  # not proved by structure: pdfium shows its colours
        full = shown if shown is not None and shown.size == exact.size else render_like(out, exact.size)
    return PageSides(before, after, *_at_colour_dpi(ctx, exact, full), problems)


def _at_colour_dpi(
    ctx: RasterSides, exact: Image.Image, full: Image.Image
) -> tuple[Image.Image, Image.Image]:
    step = -(-ctx.dpi // COLOUR_DPI)
    return (exact.reduce(step), full.reduce(step)) if step > 1 else (exact, full)


def page_problem(
    ctx: RasterSides, index: int, src: pdfium.PdfPage, out: pdfium.PdfPage, drawn: PageMarks,
    geo: PageGeometry,
) -> str | None:
    """What is wrong with raster page `index` (None: nothing): the mark (`drawn`, the marks of a selected
    page; empty: the page is not selected) must show where it is, the page look as before elsewhere, and
    its colours there stay within the colour bound (pixel_proof.colour_problem)."""
    pair = sides(ctx, index, src, out)
    keep = None
    if not drawn:
        problem = raster_unselected_problem(pair.before, pair.after)
    else:
        faintest = min(m.spec.opacity for m in drawn)
        mask = coverage_mask(geo, drawn, pair.before.size)
        problem = raster_pixel_problem(pair.before, pair.after, mask, faintest)
        keep = unmarked_area(mask, pair.fine_before.size)
    colours = colour_problem(pair.fine_before, pair.fine_after, keep)
    return "; ".join([*pair.problems, *(p for p in (problem, colours) if p)]) or None


def unmarked_area(mask: Image.Image, size: tuple[int, int]) -> Image.Image:
    """Where a page of `size` pixels is surely outside its marks: comparison pixels (each covering many
    fine ones) with no coverage and no neighbour with any, scaled up to `size`."""
    near = mask.point([0] + [255] * 255).filter(ImageFilter.MaxFilter(3))
    return ImageOps.invert(near).resize(size, Image.Resampling.NEAREST)


__all__ = ["COLOUR_DPI", "PageSides", "RasterSides", "Undecodable", "decode", "page_problem", "shown_image",
           "sides", "unmarked_area"]
