"""No mark hides the page's own text: which marks are opaque enough to hide it (their opacity above the
legible limit of their colour), where each one's boxes fall on a page, the per-page fit that keeps them
off the page's text (a header or footer moved into the free band of its edge, shrinking within limits;
else the class's `obscure` rule: refuse, reduce to the legible opacity, or allow), and the validator's
proof of it page by page ("text_not_obscured")."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import pikepdf
import pypdfium2 as pdfium

from docfence.core.errors import UnsupportedFeature
from docfence.core.policy import WatermarkSpec
from docfence.engines.checks import Check, bounded, check, merge_pages, page_ranges
from docfence.engines.geometry import PageGeometry
from docfence.engines.mark_art import ArtShop
from docfence.engines.mark_placement import EdgeFitSpec, edge_layout, extent, placements
from docfence.engines.marks import Fit, MarkSet, PageMark
from docfence.engines.outline_text import UNITS, Outline, outline_text
from docfence.engines.text_boxes import Box, PageBoxes, document_boxes

# Legibility: black text on white paper must keep WCAG 2 AA contrast (4.5:1, body text) where a mark
# lies over it (overlay: the mark tints paper and ink alike) or under it (underlay: the mark tints only
# the paper). The largest opacity that keeps it, per mark colour: 0.544 black, 0.6 dark grey (0.25),
# 0.525 the default red, 0.465 white; an image mark takes the lowest over all greys (0.465).
MIN_CONTRAST = 4.5
# Edge fit limits: a header or footer keeps at least half its size and never goes below 6 pt (small print
# still read on paper), keeps at least 4 pt from the page edge and 2 pt from the nearest text.
MIN_SHRINK = 0.5
MIN_EM_PT = 6.0
MIN_MARGIN_PT = 4.0
TEXT_GAP_PT = 2.0
_TOUCH = 0.05  # points two boxes must overlap by to count (rounding of the text rectangles)

Point = tuple[float, float]
Quad = tuple[Point, Point, Point, Point]


def _linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _luminance(rgb: tuple[float, float, float]) -> float:
    r, g, b = (_linear(min(max(v, 0.0), 1.0)) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(opacity: float, color: tuple[float, float, float], layer: str) -> float:
    r, g, b = color
    paper = (1.0 - opacity * (1 - r), 1.0 - opacity * (1 - g), 1.0 - opacity * (1 - b))
    ink = (0.0, 0.0, 0.0) if layer == "underlay" else (opacity * r, opacity * g, opacity * b)
    return (_luminance(paper) + 0.05) / (_luminance(ink) + 0.05)


@functools.lru_cache(maxsize=64)
def _limit(color: tuple[float, float, float], layer: str) -> float:
    if _contrast(1.0, color, layer) >= MIN_CONTRAST:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(40):  # the contrast falls as the opacity rises: bisect
        mid = (low + high) / 2
        low, high = (mid, high) if _contrast(mid, color, layer) >= MIN_CONTRAST else (low, mid)
    return math.floor(low * 1000) / 1000


def legible_opacity(spec: WatermarkSpec) -> float:
    """The largest opacity at which text under (or over) the mark stays legible (MIN_CONTRAST)."""
    if spec.image is not None:
        return min(_limit((g / 20, g / 20, g / 20), spec.layer) for g in range(21))
    return _limit(spec.color, spec.layer)


def can_hide_text(spec: WatermarkSpec) -> bool:
    """The mark is more opaque than its legible limit: it must not lie over the page's text."""
    return spec.opacity > legible_opacity(spec)


def mark_quads(outline: Outline, spec: WatermarkSpec, geo: PageGeometry) -> list[Quad]:
    """Each placement's box (the outline's box, scaled, rotated and moved) in display coordinates."""
    width, height = geo.display_size
    x0, y0, x1, y1 = outline.bbox
    quads: list[Quad] = []
    for a, b, c, d, e, f in placements(spec, outline, width, height):
        p0, p1, p2, p3 = ((a * x + c * y + e, b * x + d * y + f)
                          for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1)))
        quads.append((p0, p1, p2, p3))
    return quads


def _overlaps(quad: Quad, box: Box) -> bool:
    """Separating axes: the box's two axes and the quad's two edge normals."""
    bx0, by0, bx1, by1 = box
    corners = ((bx0, by0), (bx1, by0), (bx1, by1), (bx0, by1))
    axes = [(1.0, 0.0), (0.0, 1.0)]
    for (px, py), (qx, qy) in ((quad[0], quad[1]), (quad[1], quad[2])):
        length = math.hypot(qx - px, qy - py)
        if length > 0:
            axes.append((-(qy - py) / length, (qx - px) / length))
    for ax, ay in axes:
        q = [ax * x + ay * y for x, y in quad]
        r = [ax * x + ay * y for x, y in corners]
        if min(max(q), max(r)) - max(min(q), min(r)) <= _TOUCH:
            return False
    return True


def covered(quads: list[Quad], boxes: tuple[Box, ...]) -> int:
    """How many of `boxes` lie (partly) under one of `quads`. Each quad's own box rejects most text boxes
    at once, and decides alone for an upright quad (a header or footer); a tilted one is tested exactly."""
    found = 0
    for q in quads:
        xs, ys = [x for x, _ in q], [y for _, y in q]
        qx0, qy0, qx1, qy1 = min(xs), min(ys), max(xs), max(ys)
        upright = q[0][1] == q[1][1] or q[0][0] == q[1][0]
        boxes_left = []
        for box in boxes:
            apart = (min(qx1, box[2]) - max(qx0, box[0]) <= _TOUCH
                     or min(qy1, box[3]) - max(qy0, box[1]) <= _TOUCH)
            if apart or not (upright or _overlaps(q, box)):
                boxes_left.append(box)
            else:
                found += 1
        boxes = tuple(boxes_left)
    return found


def edge_fit(outline: Outline, spec: WatermarkSpec, geo: PageGeometry,
             boxes: tuple[Box, ...]) -> EdgeFitSpec | None:
    """The header or footer moved into the first free band, counted from its edge, between the text
    its width spans: never further from the edge than the configured mark reaches, first only moved
    (down to MIN_MARGIN_PT from the edge, TEXT_GAP_PT from text), then smaller (down to MIN_SHRINK of
    its size, never below MIN_EM_PT); None when no band holds it."""
    width, height = geo.display_size
    angle = spec.angle or 0.0
    scale, margin = edge_layout(spec, outline, width, height)
    ext_w, ext_h = extent(outline, angle, scale)
    per_scale, reach = ext_h / scale, margin + ext_h
    smallest = min(scale, max(MIN_EM_PT / UNITS, MIN_SHRINK * scale))
    for low, high in _free_bands(spec.position, geo, boxes, (width - ext_w) / 2, (width + ext_w) / 2):
        low, high = max(low, MIN_MARGIN_PT), min(high, reach)
        fitted = math.floor(min(scale, (high - low) / per_scale) * 1e5) / 1e5
        if low >= reach:
            break
        if fitted < smallest:
            continue
        at = math.floor(min(max(margin, low), high - per_scale * fitted) * 100) / 100
        values = {f.name: getattr(spec, f.name) for f in dataclasses.fields(WatermarkSpec)}
        moved = EdgeFitSpec(**values, edge_scale=fitted, edge_margin=max(at, low))
        if not covered(mark_quads(outline, moved, geo), boxes):
            return moved
    return None


def _free_bands(position: str, geo: PageGeometry, boxes: tuple[Box, ...], left: float,
                right: float) -> list[tuple[float, float]]:
    """(from, to) distances from the mark's edge of the page that no box between `left` and `right`
    reaches, nearest the edge first, TEXT_GAP_PT kept from each box."""
    height = geo.display_size[1]
    spans = sorted((b[1], b[3]) if position == "footer" else (height - b[3], height - b[1])
                   for b in boxes if b[2] > left and b[0] < right)
    bands, edge = [], 0.0
    for near, far in spans:
        if near - TEXT_GAP_PT > edge:
            bands.append((edge, near - TEXT_GAP_PT))
        edge = max(edge, far + TEXT_GAP_PT)
    bands.append((edge, math.inf))
    return bands


def mark_outline(mark: PageMark) -> Outline:
    """The extent the engine lays `mark` out by (mark_art.ArtShop's), made once per process for each
    text, logo and `{page}` layout, so the engine's fit and the validator's proof share it."""
    if mark.spec.image is None and not mark.per_page:
        return outline_text(mark.text)  # what ArtShop draws a static text as
    shape = tuple([len(text) if per_page else text for text, per_page in mark.runs])
    return _art_outline(mark.spec.image, shape)


@functools.lru_cache(maxsize=64)
def _art_outline(image: str | None, shape: tuple[str | int, ...]) -> Outline:
    if image is not None:
        mark = PageMark(0, WatermarkSpec(image=image), "", ())
    else:  # the digits do not matter: the layout counts each slot as wide as any digit
        runs = tuple((part, False) if isinstance(part, str) else ("0" * part, True) for part in shape)
        mark = PageMark(0, WatermarkSpec(), "", runs)
    return ArtShop(pikepdf.new()).art(mark).outline


class _Fitter:
    """Fits one job's marks page by page, by its class's rule."""

    def __init__(self, rule: str) -> None:
        self.rule = rule

    @staticmethod
    def outline(mark: PageMark) -> Outline:
        return mark_outline(mark)

    def fit(self, index: int, mark: PageMark, geo: PageGeometry, boxes: PageBoxes) -> Fit | None:
        """Where the mark lies over text: a header or footer in a free band (clear of the drawings
        too where one is), else what the rule says; None: drawn as configured."""
        spec = mark.spec
        outline = self.outline(mark)
        if not covered(mark_quads(outline, spec, geo), boxes.text):
            return None
        if spec.position in ("header", "footer"):
            moved = (edge_fit(outline, spec, geo, boxes.text + boxes.drawings) if boxes.drawings else None) \
                or edge_fit(outline, spec, geo, boxes.text)
            if moved is not None:
                return index, mark.index, moved
        if self.rule == "allow":
            return None
        if self.rule == "refuse":
            raise UnsupportedFeature(
                f"Mark {mark.index + 1} would hide text on page {index + 1} (opacity {spec.opacity:g}, "
                f"legible up to {legible_opacity(spec):g}) and no free space holds it; its class refuses "
                "that (obscure = refuse).")
        return index, mark.index, dataclasses.replace(spec, opacity=legible_opacity(spec))


def pages_at_risk(marks: MarkSet, count: int) -> dict[int, tuple[PageMark, ...]]:
    """0-based page -> its marks that can hide text (none for a policy frozen before the rule)."""
    if marks.obscure is None:
        return {}
    found = {}
    for index in range(count):
        risky = tuple(m for m in marks.on_page(index, count) if can_hide_text(m.spec))
        if risky:
            found[index] = risky
    return found


def fit_marks(marks: MarkSet, data: bytes, password: str | None, geos: list[PageGeometry]) -> MarkSet:
    """`marks` with each page's fits, laid out against the text of `data` (the document as it will be
    marked; `geos`: its pages' geometry). Nothing is read when no mark can hide text. Raises
    UnsupportedFeature (nothing is drawn) where the class refuses a mark that would hide text."""
    at_risk = pages_at_risk(marks, len(geos))
    if not at_risk:
        return marks
    try:
        boxes = document_boxes(data, password, sorted(at_risk), geos)
    except (pdfium.PdfiumError, IndexError):  # unread pages count as text everywhere
        boxes = {i: PageBoxes(((0.0, 0.0, *geos[i].display_size),)) for i in at_risk}
    fitter = _Fitter(marks.obscure or "allow")
    fits = [fit for index, risky in at_risk.items() for mark in risky
            if (fit := fitter.fit(index, mark, geos[index], boxes[index])) is not None]
    return dataclasses.replace(marks, fitted=tuple(fits)) if fits else marks


def _describe(fit: Fit, marks: MarkSet) -> str:
    page, index, spec = fit
    own = marks.marks[index]
    if isinstance(spec, EdgeFitSpec):
        return (f"page {page + 1}: mark {index + 1} moved into the free {spec.position} band "
                f"({spec.edge_scale * UNITS:.1f} pt, {spec.edge_margin:g} pt from the edge)")
    return f"page {page + 1}: mark {index + 1} opacity {own.opacity:g} -> {spec.opacity:g} (legible)"


def text_not_obscured(data: bytes, password: str | None, marks: MarkSet,
                      geos: list[PageGeometry]) -> Check:
    """The validator's proof, per page: no text object's box in `data` (the output in vector mode, whose
    text is the input's; the input in raster mode), and so no glyph box a reader extracts, lies under a
    box of a mark that can hide text, unless the class allows it (`obscure = "allow"`, or a policy from
    before the rule)."""
    at_risk = pages_at_risk(marks, len(geos))
    rule = marks.obscure or "allow"
    about: dict[str, Any] = {"rule": marks.obscure or "none (policy from before the rule)",
                             "pages": page_ranges(sorted(at_risk))}
    if marks.fitted:
        about["fitted"] = bounded(merge_pages([_describe(fit, marks) for fit in marks.fitted]))
    if not at_risk:
        return check("text_not_obscured", [], method="no mark is more opaque than its legible limit, "
                     "so none can hide text", **about)
    try:
        boxes = document_boxes(data, password, sorted(at_risk), geos)
    except (pdfium.PdfiumError, IndexError) as exc:
        return check("text_not_obscured", [f"the text could not be read: {type(exc).__name__}"], **about)
    found = []
    for index, risky in at_risk.items():
        for mark in risky:
            hidden = covered(mark_quads(mark_outline(mark), mark.spec, geos[index]), boxes[index].text)
            if hidden:
                found.append(f"page {index + 1}: mark {mark.index + 1} (opacity {mark.spec.opacity:g}, "
                             f"legible up to {legible_opacity(mark.spec):g}) covers {hidden} text objects")
    method = ("the bounds of every text object pdfium parses (each holds its glyphs' boxes) against the "
              f"boxes of marks more opaque than their legible limit (WCAG contrast {MIN_CONTRAST:g}:1)")
    if rule == "allow":
        return check("text_not_obscured", [], method=method, allowed=bounded(merge_pages(found)), **about)
    return check("text_not_obscured", found, method=method, **about)


__all__ = ["can_hide_text", "covered", "edge_fit", "fit_marks", "legible_opacity", "mark_outline",
           "mark_quads", "pages_at_risk", "text_not_obscured"]
