"""Watermark text as glyph OUTLINES (PDF path operators): no font is embedded and text extraction is
never polluted. Glyphs come from installed TrueType/OpenType fonts with per-glyph fallback."""

from __future__ import annotations

import functools
import io
from dataclasses import dataclass
from pathlib import Path

from fontTools.pens.basePen import BasePen
from fontTools.pens.boundsPen import BoundsPen
from fontTools.pens.transformPen import TransformPen
from fontTools.ttLib import TTFont

from docfence.core.errors import ConfigError

# Debian packages: fonts-dejavu-core (Latin, Greek, Cyrillic, symbols), fonts-wqy-microhei (CJK).
FONT_CANDIDATES: tuple[tuple[str, int], ...] = (
    ("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf", 0),
    ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 0),
    ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 0),
    ("/usr/share/fonts/truetype/noto/NotoSans-Bold.ttf", 0),
)
UNITS = 1000.0  # outline coordinates: 1000 units per em


@dataclass(frozen=True)
class Outline:
    """Path operators drawing the text at 1000 units/em, baseline at y=0, and its bounding box."""

    ops: bytes
    bbox: tuple[float, float, float, float]
    advance: float = 0.0  # where the next character would start (runs of one line are laid end to end)

    @property
    def width(self) -> float:
        return self.bbox[2] - self.bbox[0]

    @property
    def height(self) -> float:
        return self.bbox[3] - self.bbox[1]


Segment = tuple[str, tuple[float, ...]]  # PDF path operator and its coordinates


class PdfPathPen(BasePen):  # type: ignore[misc]  # fontTools ships no type hints
    """A fontTools pen recording PDF path segments (quadratic curves raised to cubic)."""

    def __init__(self, glyph_set: object) -> None:
        super().__init__(glyphSet=glyph_set)
        self.segments: list[Segment] = []
        self._last = (0.0, 0.0)

    def _moveTo(self, pt: tuple[float, float]) -> None:
        self.segments.append(("m", pt))
        self._last = pt

    def _lineTo(self, pt: tuple[float, float]) -> None:
        self.segments.append(("l", pt))
        self._last = pt

    def _curveToOne(self, p1: tuple[float, float], p2: tuple[float, float], p3: tuple[float, float]) -> None:
        self.segments.append(("c", (*p1, *p2, *p3)))
        self._last = p3

    def _qCurveToOne(self, p1: tuple[float, float], p2: tuple[float, float]) -> None:
        p0 = self._last
        c1 = (p0[0] + 2 * (p1[0] - p0[0]) / 3, p0[1] + 2 * (p1[1] - p0[1]) / 3)
        c2 = (p2[0] + 2 * (p1[0] - p2[0]) / 3, p2[1] + 2 * (p1[1] - p2[1]) / 3)
        self._curveToOne(c1, c2, p2)

    def _closePath(self) -> None:
        self.segments.append(("h", ()))


def _emit(segments: tuple[Segment, ...], dx: float) -> list[str]:
    """The segments as PDF path operators, moved `dx` units to the right."""
    out = []
    for op, pts in segments:
        coords = " ".join(f"{v + dx:.1f}" if k % 2 == 0 else f"{v:.1f}" for k, v in enumerate(pts))
        out.append(f"{coords} {op}" if coords else op)
    return out


@functools.lru_cache(maxsize=8)
def _font(path: str, number: int) -> TTFont | None:
    if not Path(path).exists():
        return None
    # from memory, not from an open file: forked processes (render processes of one zygote, validation
    # and raster pieces) share an open file's offset, so two of them reading glyphs lazily at once
    # would read each other's bytes ("cmap subtable is truncated")
    return TTFont(io.BytesIO(Path(path).read_bytes()), fontNumber=number, lazy=True)


def available_fonts() -> list[TTFont]:
    fonts = [_font(path, number) for path, number in FONT_CANDIDATES]
    return [f for f in fonts if f is not None]


def _font_for(char: str, fonts: list[TTFont]) -> TTFont | None:
    for font in fonts:
        cmap = font.getBestCmap() or {}
        if ord(char) in cmap:
            return font
    return None


@functools.lru_cache(maxsize=2048)
def _glyph(char: str) -> tuple[tuple[Segment, ...], tuple[float, float, float, float] | None, float]:
    """One character's outline at the origin (segments, bounds, advance), drawn once per process: the
    page numbers of a 2,000-page footer reuse ten digits instead of outlining 2,000 strings."""
    font = _font_for(char, available_fonts())
    if font is None:
        raise ConfigError("no installed font can draw a character of the watermark text")
    scale = UNITS / font["head"].unitsPerEm
    glyph_set = font.getGlyphSet()
    glyph = glyph_set[font.getBestCmap()[ord(char)]]
    transform = (scale, 0, 0, scale, 0, 0)
    pen, bounds = PdfPathPen(glyph_set), BoundsPen(glyph_set)
    glyph.draw(TransformPen(pen, transform))
    glyph.draw(TransformPen(bounds, transform))
    return tuple(pen.segments), bounds.bounds, glyph.width * scale


@functools.lru_cache(maxsize=1024)
def outline_text(text: str, start: float = 0.0) -> Outline:
    """Lay `text` out on one line as outlines, its first character at x = `start`; raises ConfigError when
    no installed font covers a glyph."""
    parts: list[str] = []
    box: tuple[float, float, float, float] | None = None
    x = start
    for char in text:
        if char.isspace():
            x += UNITS * 0.3
            continue
        segments, bounds, advance = _glyph(char)
        parts.extend(_emit(segments, x))
        if bounds is not None:
            box = _union(box, (bounds[0] + x, bounds[1], bounds[2] + x, bounds[3]))
        x += advance
    if box is None:
        raise ConfigError("the watermark text has nothing visible to draw")
    return Outline(("\n".join(parts) + "\nf\n").encode("ascii"), box, x)


def _union(
    a: tuple[float, float, float, float] | None, b: tuple[float, float, float, float] | None
) -> tuple[float, float, float, float] | None:
    if a is None or b is None:
        return a or b
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
