"""Glyph outlines with per-glyph font fallback, and layouts that stay inside tiny and rotated pages."""

from __future__ import annotations

import math

import pytest

from docfence.core.errors import ConfigError
from docfence.core.policy import POSITIONS, WatermarkSpec
from docfence.engines.geometry import PageGeometry
from docfence.engines.mark_placement import placements
from docfence.engines.outline_text import outline_text


def test_unicode_outline_uses_fallback_fonts() -> None:
    latin = outline_text("Vertraulich \u2013 Dr. Müller")
    mixed = outline_text("Vertraulich \u2013 Dr. Müller / 患者")
    assert mixed.width > latin.width > 0
    assert b" c\n" in mixed.ops and mixed.ops.endswith(b"f\n")  # filled paths, no text operators
    assert b"Tj" not in mixed.ops and b"BT" not in mixed.ops


def test_uncovered_character_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        outline_text("\U0010fffd")


def _corners(m: tuple[float, ...], box: tuple[float, float, float, float]) -> list[tuple[float, float]]:
    a, b, c, d, e, f = m
    return [(a * x + c * y + e, b * x + d * y + f) for x in (box[0], box[2]) for y in (box[1], box[3])]


@pytest.mark.parametrize("position", [p for p in POSITIONS if p != "tiled"])
@pytest.mark.parametrize("size", [(72.0, 72.0), (275.0, 50.0), (595.0, 842.0), (960.0, 540.0)])
def test_single_marks_fit_inside_the_page(position: str, size: tuple[float, float]) -> None:
    outline = outline_text("CONFIDENTIAL")
    (matrix,) = placements(WatermarkSpec(position=position), outline, *size)
    for x, y in _corners(matrix, outline.bbox):
        assert -0.5 <= x <= size[0] + 0.5 and -0.5 <= y <= size[1] + 0.5
    assert math.hypot(matrix[0], matrix[1]) * outline.height > 2  # still visible (> 2 pt tall)


def test_display_to_user_maps_the_visible_box_for_every_rotation() -> None:
    crop = (100.0, 200.0, 400.0, 600.0)
    for rotate in (0, 90, 180, 270):
        geo = PageGeometry(media=(0.0, 0.0, 612.0, 792.0), crop=crop, rotate=rotate)
        w, h = geo.display_size
        a, b, c, d, e, f = geo.display_to_user()
        pts = [(a * u + c * v + e, b * u + d * v + f) for u in (0, w) for v in (0, h)]
        assert {(round(x), round(y)) for x, y in pts} == {(100, 200), (100, 600), (400, 200), (400, 600)}
        top_left = (a * 0 + c * h + e, b * 0 + d * h + f)
        expected = {0: (100, 600), 90: (100, 200), 180: (400, 200), 270: (400, 600)}[rotate]
        assert (round(top_left[0]), round(top_left[1])) == expected


def test_fonts_are_read_from_memory_not_from_a_shared_file_offset() -> None:
    """Forked processes share an open file's offset: fonts read lazily from a file by two of them at once
    read each other's bytes. Each font reads from its own in-memory copy, which a fork copies."""
    import io

    from docfence.engines.outline_text import available_fonts

    fonts = available_fonts()
    assert fonts
    assert all(isinstance(font.reader.file, io.BytesIO) for font in fonts)
