"""Watermark layout for one displayed page size: where the text outline goes (matrices from outline
units to upright display coordinates) for each position preset, fitted so it stays visible on tiny pages,
and the edge fit a header or footer gets on a page whose own text reaches into its default band."""

from __future__ import annotations

import math
from dataclasses import dataclass

from docfence.core.policy import WatermarkSpec
from docfence.engines.geometry import Matrix, multiply
from docfence.engines.outline_text import UNITS, Outline

_MAX_TILES = 120


@dataclass(frozen=True)
class EdgeFitSpec(WatermarkSpec):
    """A header or footer mark moved into the free band of its edge on one page (engines/mark_obscure):
    drawn at `edge_scale` (outline units to points) with `edge_margin` points between its box and the
    page edge. Made only at render time, never stored in a policy; as a distinct class it never equals
    the spec it was made from, so the forms of fitted and unfitted pages are never shared."""

    edge_scale: float = 0.0
    edge_margin: float = 0.0


def _fit_scale(outline: Outline, angle: float, max_w: float, max_h: float) -> float:
    """Largest outline scale whose rotated bounding box fits max_w x max_h."""
    c, s = abs(math.cos(math.radians(angle))), abs(math.sin(math.radians(angle)))
    w, h = outline.width, outline.height
    return min(max_w / (w * c + h * s), max_h / (w * s + h * c))


def _extent(outline: Outline, angle: float, scale: float) -> tuple[float, float]:
    c, s = abs(math.cos(math.radians(angle))), abs(math.sin(math.radians(angle)))
    w, h = outline.width * scale, outline.height * scale
    return w * c + h * s, w * s + h * c


def _place(outline: Outline, scale: float, angle: float, cx: float, cy: float) -> Matrix:
    """Outline centre -> (cx, cy), scaled and rotated counter-clockwise by `angle` degrees."""
    bx0, by0, bx1, by1 = outline.bbox
    centre: Matrix = (1.0, 0.0, 0.0, 1.0, -(bx0 + bx1) / 2, -(by0 + by1) / 2)
    rad = math.radians(angle)
    rot: Matrix = (
        scale * math.cos(rad),
        scale * math.sin(rad),
        -scale * math.sin(rad),
        scale * math.cos(rad),
        cx,
        cy,
    )
    return multiply(centre, rot)


def _scale(spec: WatermarkSpec, fit: float, auto_cap_pt: float | None) -> float:
    if spec.font_size is not None:
        return min(fit, spec.font_size / UNITS)
    return min(fit, auto_cap_pt / UNITS) if auto_cap_pt else fit


def placements(spec: WatermarkSpec, outline: Outline, width: float, height: float) -> list[Matrix]:
    """Matrices from outline units to display coordinates of a `width` x `height` page."""
    pos = spec.position
    if pos == "diagonal":
        angle = spec.angle if spec.angle is not None else math.degrees(math.atan2(height, width))
        scale = _scale(spec, _fit_scale(outline, angle, 0.9 * width, 0.9 * height), None)
        return [_place(outline, scale, angle, width / 2, height / 2)]
    if pos == "center":
        angle = spec.angle or 0.0
        scale = _scale(spec, _fit_scale(outline, angle, 0.8 * width, 0.8 * height), 72.0)
        return [_place(outline, scale, angle, width / 2, height / 2)]
    if pos in ("header", "footer"):
        angle = spec.angle or 0.0
        if isinstance(spec, EdgeFitSpec):
            scale, margin = spec.edge_scale, spec.edge_margin
        else:
            scale, margin = edge_layout(spec, outline, width, height)
        ext_h = _extent(outline, angle, scale)[1]
        cy = height - margin - ext_h / 2 if pos == "header" else margin + ext_h / 2
        return [_place(outline, scale, angle, width / 2, cy)]
    return _tiled(spec, outline, width, height)


def edge_layout(spec: WatermarkSpec, outline: Outline, width: float, height: float) -> tuple[float, float]:
    """(scale, margin to the edge in points) of a header or footer as configured: fitted to 0.9 of the
    width and to its band (15% of the height, at least 36 pt), at most `font_size` (auto: 24 pt)."""
    angle = spec.angle or 0.0
    band = max(0.15 * height, min(0.9 * height, 36.0)) if height > 100 else 0.3 * height
    scale = _scale(spec, _fit_scale(outline, angle, 0.9 * width, band), 24.0)
    return scale, min(0.03 * height, 18.0)


def extent(outline: Outline, angle: float, scale: float) -> tuple[float, float]:
    """Width and height of the outline's box at `scale`, rotated by `angle` degrees."""
    return _extent(outline, angle, scale)


def _tiled(spec: WatermarkSpec, outline: Outline, width: float, height: float) -> list[Matrix]:
    angle = spec.angle if spec.angle is not None else 45.0
    fit = _fit_scale(outline, angle, 0.9 * width, 0.9 * height)
    scale = _scale(spec, min(fit, max(width, height) / 3.5 / outline.width), None)
    ext_w, ext_h = _extent(outline, angle, scale)
    step_x, step_y = ext_w * 1.3, ext_h * 1.6
    while math.ceil(width / step_x + 1) * math.ceil(height / step_y + 1) > _MAX_TILES:
        step_x, step_y = step_x * 1.25, step_y * 1.25
    cols, rows = math.ceil(width / step_x) + 1, math.ceil(height / step_y) + 1
    off_x = (width - (cols - 1) * step_x) / 2
    off_y = (height - (rows - 1) * step_y) / 2
    return [
        _place(outline, scale, angle, off_x + i * step_x, off_y + j * step_y)
        for j in range(rows)
        for i in range(cols)
    ]
