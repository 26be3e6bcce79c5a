"""Where a page's own text and drawings are, from its content stream as pdfium parses it (no OCR): the
bounds of its text objects (each the union of its glyphs' boxes, so every glyph box a reader extracts lies
inside one) and of its paths and images, in upright display coordinates of the visible box (the
coordinates mark layout uses), for mark placement and for the validator's proof that no mark hides text."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from docfence.engines.geometry import Matrix, PageGeometry, multiply

Box = tuple[float, float, float, float]  # x0, y0, x1, y1
_MAX_DEPTH = 12  # forms in forms: deeper nesting is read as text everywhere (below)
_MAX_OBJECTS = 200_000  # objects walked on one page before the page is read as text everywhere
_BACKGROUND = 0.5  # a drawing over half the page (a background, a scan) is no obstacle to place around
_TEXT, _FORM = pdfium_c.FPDF_PAGEOBJ_TEXT, pdfium_c.FPDF_PAGEOBJ_FORM
_DRAWN = frozenset({pdfium_c.FPDF_PAGEOBJ_PATH, pdfium_c.FPDF_PAGEOBJ_IMAGE, pdfium_c.FPDF_PAGEOBJ_SHADING})
_IDENTITY: Matrix = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


@dataclass(frozen=True)
class PageBoxes:
    """A page's text boxes and drawing boxes (backgrounds left out), in display coordinates."""

    text: tuple[Box, ...]
    drawings: tuple[Box, ...] = ()


def invert(m: Matrix) -> Matrix:
    """The inverse of an affine matrix (PDF row-vector convention, as geometry.multiply)."""
    a, b, c, d, e, f = m
    det = a * d - b * c
    return (d / det, -b / det, -c / det, a / det, (c * f - d * e) / det, (b * e - a * f) / det)


def transform_box(box: Box, m: Matrix) -> Box:
    """The axis-aligned box of `box`'s corners mapped by `m`."""
    a, b, c, d, e, f = m
    xs, ys = [], []
    for x, y in ((box[0], box[1]), (box[2], box[1]), (box[0], box[3]), (box[2], box[3])):
        xs.append(a * x + c * y + e)
        ys.append(b * x + d * y + f)
    return (min(xs), min(ys), max(xs), max(ys))


class _Walk:
    """Collects the user-space bounds of a page's text and drawing objects, forms descended into."""

    def __init__(self) -> None:
        self.text: list[Box] = []
        self.drawings: list[Box] = []
        self.seen = 0
        self.complete = True

    def objects(self, parent: object, form: bool, to_page: Matrix, depth: int) -> None:
        count = (pdfium_c.FPDFFormObj_CountObjects if form else pdfium_c.FPDFPage_CountObjects)(parent)
        get = pdfium_c.FPDFFormObj_GetObject if form else pdfium_c.FPDFPage_GetObject
        for i in range(max(count, 0)):
            self.seen += 1
            if self.seen > _MAX_OBJECTS:
                self.complete = False
                return
            obj = get(parent, i)
            kind = pdfium_c.FPDFPageObj_GetType(obj) if obj else -1
            if kind == _FORM:
                if depth >= _MAX_DEPTH:
                    self.complete = False
                    return
                self.objects(obj, True, multiply(_matrix(obj), to_page), depth + 1)
            elif kind == _TEXT or kind in _DRAWN:
                bounds = _bounds(obj)
                if bounds is not None:
                    (self.text if kind == _TEXT else self.drawings).append(transform_box(bounds, to_page))


def _matrix(obj: object) -> Matrix:
    m = pdfium_c.FS_MATRIX()
    if not pdfium_c.FPDFPageObj_GetMatrix(obj, m):
        return _IDENTITY
    return (m.a, m.b, m.c, m.d, m.e, m.f)


def _bounds(obj: object) -> Box | None:
    """The object's bounds in its container's space (a form's own space for what a form draws)."""
    left, bottom, right, top = ctypes.c_float(), ctypes.c_float(), ctypes.c_float(), ctypes.c_float()
    if not pdfium_c.FPDFPageObj_GetBounds(obj, left, bottom, right, top):
        return None
    return (left.value, bottom.value, right.value, top.value)


def page_boxes(page: pdfium.PdfPage, geo: PageGeometry) -> PageBoxes:
    """The page's text and drawing boxes in display coordinates, cut to the visible box (objects wholly
    outside it are left out). A page too deep or too large to walk reads as text everywhere, so no
    opaque mark is placed over any of it."""
    width, height = geo.display_size
    walk = _Walk()
    walk.objects(page.raw, False, invert(geo.display_to_user()), 0)
    if not walk.complete:
        return PageBoxes(((0.0, 0.0, width, height),))
    area = width * height

    def visible(boxes: list[Box], largest: float) -> tuple[Box, ...]:
        cut = [(max(x0, 0.0), max(y0, 0.0), min(x1, width), min(y1, height)) for x0, y0, x1, y1 in boxes]
        return tuple(b for b in cut if b[2] > b[0] and b[3] > b[1] and (b[2] - b[0]) * (b[3] - b[1])
                     <= largest)

    return PageBoxes(visible(walk.text, area), visible(walk.drawings, _BACKGROUND * area))


def document_boxes(data: bytes, password: str | None, pages: Iterable[int],
                   geos: list[PageGeometry]) -> dict[int, PageBoxes]:
    """page_boxes of each of `pages` (0-based) of the PDF `data`, by page; raises pdfium.PdfiumError
    when pdfium cannot open it."""
    doc = pdfium.PdfDocument(data, password=password or None)
    try:
        found: dict[int, PageBoxes] = {}
        for index in pages:
            page = doc[index]
            try:
                found[index] = page_boxes(page, geos[index])
            finally:
                page.close()
        return found
    finally:
        doc.close()


__all__ = ["Box", "PageBoxes", "document_boxes", "invert", "page_boxes", "transform_box"]
