"""Colour difference of two renders of a page: sRGB to CIELAB (D65) and CIEDE2000 (Sharma, Wu and Dalal,
2005) over numpy arrays, and the high percentile of it over the pixels a mask keeps, which the raster
engine and its validator both hold to COLOUR_BOUND_DE99."""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

FloatArray = np.ndarray[Any, np.dtype[np.float64]]

#: ΔE2000 that 99 % of a page's pixels outside its marks may not exceed against the source render. A
#: just-noticeable difference is ~1 and print tolerances are 2-5 on flat colour; the anti-aliased edges
#: of text quantised to a 16-colour palette fall between its steps (3-7 at the 99th percentile on text
#: pages), so the bound sits above that and far below a colour that moved: black text shown dark brown
#: (108, 58, 58) is 27.9 away, shown mid-gray (102, 101, 101) 30.1, pure red shown pink (255, 150, 150)
#: 24.2.
COLOUR_BOUND_DE99 = 10.0
PERCENTILE = 99.0
SAMPLE = 16384  # changed pixels measured one by one per page, at most
#: Both the engine and the validator read every 2nd pixel of every 2nd row of a page (the pixels
#: themselves, not averages; on_grid): a quarter of the cost of reading all (~30 ms a page at 150 DPI),
#: and a colour that moved on more than 1 % of a page moves on about as many of these. The same grid on
#: both sides, so the engine's check sees the pixels the validator will; a sparser one missed a grid of
#: one-pixel rules whose lines fell between its columns.
COLOUR_STEP = 2

_SRGB_TO_XYZ = np.array([[0.4124564, 0.3575761, 0.1804375],
                         [0.2126729, 0.7151522, 0.0721750],
                         [0.0193339, 0.1191920, 0.9503041]])
_WHITE_D65 = np.array([0.95047, 1.0, 1.08883])
_EPSILON = (6.0 / 29.0) ** 3
_LINEAR = np.array([c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
                    for c in (v / 255.0 for v in range(256))])
_POW7_25 = 25.0**7


def lab(rgb: np.ndarray[Any, np.dtype[Any]]) -> FloatArray:
    """CIELAB (D65, L* 0-100) of 8-bit sRGB values, shape (..., 3) in and out."""
    linear = _LINEAR[rgb.astype(np.intp)]
    r, g, b = linear[..., 0], linear[..., 1], linear[..., 2]
    # the matrix applied by hand: a matrix product would call BLAS, whose thread pool a render process
    # (limited in how many tasks it may have) must not start
    fx, fy, fz = (_f(m[0] * r + m[1] * g + m[2] * b) for m in _SRGB_TO_XYZ / _WHITE_D65[:, None])
    return np.stack([116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)], axis=-1)


def _f(t: FloatArray) -> FloatArray:
    result: FloatArray = np.where(t > _EPSILON, np.cbrt(t), t / (3 * (6.0 / 29.0) ** 2) + 4.0 / 29.0)
    return result


def ciede2000(lab1: FloatArray, lab2: FloatArray) -> FloatArray:
    """ΔE2000 of each pair of CIELAB colours (arrays of shape (..., 3)), kL = kC = kH = 1."""
    l1, a1, b1 = lab1[..., 0], lab1[..., 1], lab1[..., 2]
    l2, a2, b2 = lab2[..., 0], lab2[..., 1], lab2[..., 2]
    c7 = ((np.hypot(a1, b1) + np.hypot(a2, b2)) / 2.0) ** 7
    g = 0.5 * (1.0 - np.sqrt(c7 / (c7 + _POW7_25)))
    a1p, a2p = a1 * (1.0 + g), a2 * (1.0 + g)
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p = np.degrees(np.arctan2(b1, a1p)) % 360.0  # atan2(0, 0) is 0, as the formula asks
    h2p = np.degrees(np.arctan2(b2, a2p)) % 360.0
    chroma = c1p * c2p
    dh = h2p - h1p
    dh = np.where(dh > 180.0, dh - 360.0, np.where(dh < -180.0, dh + 360.0, dh))
    dh = np.where(chroma == 0.0, 0.0, dh)
    big_dh = 2.0 * np.sqrt(chroma) * np.sin(np.radians(dh) / 2.0)
    hsum = h1p + h2p
    hbar = np.where(np.abs(h1p - h2p) <= 180.0, hsum / 2.0,
                    np.where(hsum < 360.0, (hsum + 360.0) / 2.0, (hsum - 360.0) / 2.0))
    hbar = np.where(chroma == 0.0, hsum, hbar)
    t = (1.0 - 0.17 * np.cos(np.radians(hbar - 30.0)) + 0.24 * np.cos(np.radians(2.0 * hbar))
         + 0.32 * np.cos(np.radians(3.0 * hbar + 6.0)) - 0.20 * np.cos(np.radians(4.0 * hbar - 63.0)))
    lbar50 = ((l1 + l2) / 2.0 - 50.0) ** 2
    cbar = (c1p + c2p) / 2.0
    cbar7 = cbar**7
    rt = (-2.0 * np.sqrt(cbar7 / (cbar7 + _POW7_25))
          * np.sin(np.radians(60.0 * np.exp(-(((hbar - 275.0) / 25.0) ** 2)))))
    dl = (l2 - l1) / (1.0 + 0.015 * lbar50 / np.sqrt(20.0 + lbar50))
    dc = (c2p - c1p) / (1.0 + 0.045 * cbar)
    dhh = big_dh / (1.0 + 0.015 * cbar * t)
    result: FloatArray = np.sqrt(np.maximum(dl**2 + dc**2 + dhh**2 + rt * dc * dhh, 0.0))
    return result


def _packed(img: Image.Image) -> np.ndarray[Any, np.dtype[np.uint32]]:
    """Each pixel as 4 bytes, red lowest (Pillow keeps RGB as 4 bytes a pixel: one copy); the fourth byte
    is the same in every pixel, so two pixels are equal exactly when their colours are."""
    rgb = img if img.mode == "RGB" else img.convert("RGB")
    return np.frombuffer(rgb.tobytes("raw", "RGBX"), dtype="<u4")


def spread(count: int, size: int) -> np.ndarray[Any, np.dtype[np.intp]]:
    """`size` indices into range(`count`), spread by the golden-ratio sequence: evenly over the range,
    in no period a page's rules or text lines could share, the same every time (numpy.random would do,
    but importing it costs each render process ~0.15 s)."""
    steps = np.arange(size, dtype=np.float64) * 0.6180339887498949
    picked: np.ndarray[Any, np.dtype[np.intp]] = ((steps % 1.0) * count).astype(np.intp)
    return picked


def on_grid(img: Image.Image, step: int = COLOUR_STEP) -> Image.Image:
    """Every `step`-th pixel of every `step`-th row of `img` (NEAREST: the pixels themselves)."""
    size = (max(1, img.width // step), max(1, img.height // step))
    return img if img.size == size else img.resize(size, Image.Resampling.NEAREST)


def percentile_difference(before: Image.Image, after: Image.Image, keep: Image.Image | None = None,
                          percentile: float = PERCENTILE) -> float:
    """ΔE2000 at `percentile` over the pixels of two same-size images where `keep` (an 'L' mask of the
    same size, nonzero = counted; None = every pixel) is set; 0.0 when no pixel is kept.

    Pixels of the same colour on both sides count as 0 without the formula. Of the others, every one is
    counted up to SAMPLE of them, else SAMPLE of them spread() over the rest (the same page gives the
    same figure; the 99th percentile of a page then moves by ~0.2 percentile points at most).
    The formula runs once per distinct colour pair: a page has few (paper, a few inks, their edges)."""
    if before.size != after.size or (keep is not None and keep.size != before.size):
        raise ValueError("images and mask differ in size")
    first, second = _packed(before), _packed(after)
    moved = first != second
    total = len(moved)
    if keep is not None:
        kept = np.frombuffer(keep.convert("L").tobytes(), dtype=np.uint8) != 0
        moved &= kept
        total = int(np.count_nonzero(kept))
    first, second = first[moved], second[moved]
    unchanged = total - len(first)
    rank = total * percentile / 100.0
    if not total or rank <= unchanged:
        return 0.0
    weight = 1.0
    if len(first) > SAMPLE:
        pick = spread(len(first), SAMPLE)
        weight, first, second = len(first) / SAMPLE, first[pick], second[pick]
    low = np.uint32(0xFFFFFF)
    pairs = ((first & low).astype(np.uint64) << np.uint64(24)) | (second & low)
    keys, counts = np.unique(pairs, return_counts=True)
    shifts = np.array([24, 32, 40, 0, 8, 16], dtype=np.uint64)  # R, G, B of each side (red lowest)
    channels = ((keys[:, None] >> shifts) & np.uint64(0xFF)).astype(np.intp)
    difference = ciede2000(lab(channels[:, :3]), lab(channels[:, 3:]))
    order = np.argsort(difference)
    covered = unchanged + np.cumsum(counts[order] * weight)
    at = int(np.searchsorted(covered, rank))
    return float(difference[order][min(at, len(order) - 1)])


__all__ = ["COLOUR_BOUND_DE99", "COLOUR_STEP", "PERCENTILE", "SAMPLE", "ciede2000", "lab", "on_grid",
           "percentile_difference", "spread"]
