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

    @property
    def width(self) -> float:
        return self.bbox[2] - self.bbox[0]

    @property
    def height(self) -> float:
        return self.bbox[3] - self.bbox[1]


class PdfPathPen(BasePen):
    """A fontTools pen writing PDF path operators (quadratic curves raised to cubic)."""

    def __init__(self, glyph_set: object) -> None:
        super().__init__(glyphSet=glyph_set)
        self.parts: list[str] = []
        self._last = (0.0, 0.0)

    def _moveTo(self, pt: tuple[float, float]) -> None:
        self.parts.append(f"{pt[0]:.1f} {pt[1]:.1f} m")
        self._last = pt

    def _lineTo(self, pt: tuple[float, float]) -> None:
        self.parts.append(f"{pt[0]:.1f} {pt[1]:.1f} l")
        self._last = pt

    def _curveToOne(self, p1: tuple[float, float], p2: tuple[float, float], p3: tuple[float, float]) -> None:
        self.parts.append(f"{p1[0]:.1f} {p1[1]:.1f} {p2[0]:.1f} {p2[1]:.1f} {p3[0]:.1f} {p3[1]:.1f} c")
        self._last = p3

    def _qCurveToOne(self, p1: tuple[float, float], p2: tuple[float, float]) -> None:
        p0 = self._last
        c1 = (p0[0] + 2 * (p1[0] - p0[0]) / 3, p0[1] + 2 * (p1[1] - p0[1]) / 3)
        c2 = (p2[0] + 2 * (p1[0] - p2[0]) / 3, p2[1] + 2 * (p1[1] - p2[1]) / 3)
        self._curveToOne(c1, c2, p2)

    def _closePath(self) -> None:
        self.parts.append("h")


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


@functools.lru_cache(maxsize=64)
def outline_text(text: str) -> Outline:
    """Lay `text` out on one line as outlines; raises ConfigError when no installed font covers a glyph."""
    fonts = available_fonts()
    parts: list[str] = []
    box: tuple[float, float, float, float] | None = None
    x = 0.0
    for char in text:
        if char.isspace():
            x += UNITS * 0.3
            continue
        font = _font_for(char, fonts)
        if font is None:
            raise ConfigError("no installed font can draw a character of the watermark text")
        scale = UNITS / font["head"].unitsPerEm
        name = font.getBestCmap()[ord(char)]
        glyph_set = font.getGlyphSet()
        glyph = glyph_set[name]
        transform = (scale, 0, 0, scale, x, 0)
        pen, bounds = PdfPathPen(glyph_set), BoundsPen(glyph_set)
        glyph.draw(TransformPen(pen, transform))
        glyph.draw(TransformPen(bounds, transform))
        parts.extend(pen.parts)
        box = _union(box, bounds.bounds)
        x += glyph.width * scale
    if box is None:
        raise ConfigError("the watermark text has nothing visible to draw")
    return Outline(("\n".join(parts) + "\nf\n").encode("ascii"), box)


def _union(
    a: tuple[float, float, float, float] | None, b: tuple[float, float, float, float] | None
) -> tuple[float, float, float, float] | None:
    if a is None or b is None:
        return a or b
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
