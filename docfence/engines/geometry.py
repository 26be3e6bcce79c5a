"""Page geometry as the reader sees it: inherited boxes and /Rotate, the visible (crop) box, the matrix
from upright display coordinates to PDF user space, and what differs between two pages' geometry."""

from __future__ import annotations

from dataclasses import dataclass

import pikepdf

from docfence.core.errors import MalformedPdf
from docfence.engines.pdf_objects import is_dictionary

Box = tuple[float, float, float, float]
Matrix = tuple[float, float, float, float, float, float]
_INHERITABLE_DEPTH = 64
_GEOMETRY_KEYS = ("/MediaBox", "/CropBox", "/Rotate")


@dataclass(frozen=True)
class PageGeometry:
    """MediaBox, effective CropBox (clipped to the MediaBox) and effective rotation of one page."""

    media: Box
    crop: Box
    rotate: int

    @property
    def display_size(self) -> tuple[float, float]:
        """Width and height of the page as displayed (after /Rotate)."""
        w, h = self.crop[2] - self.crop[0], self.crop[3] - self.crop[1]
        return (h, w) if self.rotate in (90, 270) else (w, h)

    def media_area(self) -> float:
        return (self.media[2] - self.media[0]) * (self.media[3] - self.media[1])

    def changes_to(self, other: PageGeometry) -> list[str]:
        """What differs from `other`, as a report says it: "MediaBox [0 0 612 792] → [0 0 595 842]"."""
        found = [f"{name} {_box(mine)} → {_box(theirs)}"
                 for name, mine, theirs in (("MediaBox", self.media, other.media),
                                            ("CropBox", self.crop, other.crop)) if mine != theirs]
        if self.rotate != other.rotate:
            found.append(f"Rotate {self.rotate} → {other.rotate}")
        return found

    def display_to_user(self) -> Matrix:
        """Matrix from upright display coordinates (origin: bottom-left of the visible box) to user space."""
        x0, y0, x1, y1 = self.crop
        w, h = x1 - x0, y1 - y0
        if self.rotate == 90:
            return (0.0, 1.0, -1.0, 0.0, x0 + w, y0)
        if self.rotate == 180:
            return (-1.0, 0.0, 0.0, -1.0, x0 + w, y0 + h)
        if self.rotate == 270:
            return (0.0, -1.0, 1.0, 0.0, x0, y0 + h)
        return (1.0, 0.0, 0.0, 1.0, x0, y0)


def _box(box: Box) -> str:
    return "[" + " ".join(f"{v:g}" for v in box) + "]"


def inherited(page: pikepdf.Dictionary, key: str) -> pikepdf.Object | None:
    """Look `key` up on the page, then on its /Parent chain (bounded: a loop cannot hang us)."""
    return inherited_values(page, (key,)).get(key)


def inherited_values(page: pikepdf.Dictionary, keys: tuple[str, ...]) -> dict[str, pikepdf.Object]:
    """Each of `keys` looked up as inherited() does, in one walk up the /Parent chain that reads each
    node's key set once (pikepdf looks an absent key up as dearly as a present one); absent: left out."""
    found: dict[str, pikepdf.Object] = {}
    node: object = page
    for _ in range(_INHERITABLE_DEPTH):
        if not is_dictionary(node):
            break
        present = node.keys()
        for key in keys:
            if key not in found and key in present:
                found[key] = node[key]
        if len(found) == len(keys) or "/Parent" not in present:
            break
        node = node["/Parent"]
    return found


def as_box(value: pikepdf.Object | None) -> Box | None:
    if not isinstance(value, pikepdf.Array) or len(value) != 4:
        return None
    try:
        a, b, c, d = (float(v) for v in value)
    except (TypeError, ValueError):
        return None
    return (min(a, c), min(b, d), max(a, c), max(b, d))


def intersect(a: Box, b: Box) -> Box:
    box = (max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3]))
    return box if box[2] > box[0] and box[3] > box[1] else a


def page_geometry(page: pikepdf.Dictionary) -> PageGeometry:
    """Effective geometry, honouring inheritance; raises MalformedPdf when a page has no usable MediaBox."""
    values = inherited_values(page, _GEOMETRY_KEYS)
    media = as_box(values.get("/MediaBox"))
    if media is None or media[2] - media[0] <= 0 or media[3] - media[1] <= 0:
        raise MalformedPdf("A page has no usable MediaBox.")
    crop = as_box(values.get("/CropBox"))
    crop = intersect(media, crop) if crop else media
    raw_rotate = values.get("/Rotate")
    try:
        rotate = int(raw_rotate) if raw_rotate is not None else 0
    except (TypeError, ValueError):
        rotate = 0
    rotate = rotate % 360 if rotate % 90 == 0 else 0
    return PageGeometry(media, crop, rotate)


def multiply(m: Matrix, n: Matrix) -> Matrix:
    """m then n (PDF row-vector convention: the result maps p to (p*m)*n)."""
    a, b, c, d, e, f = m
    a2, b2, c2, d2, e2, f2 = n
    return (
        a * a2 + b * c2,
        a * b2 + b * d2,
        c * a2 + d * c2,
        c * b2 + d * d2,
        e * a2 + f * c2 + e2,
        e * b2 + f * d2 + f2,
    )
