"""What the vector watermark must look like in the output, for the validator to prove it by structure:
the exact wrapper streams around a page's own content, the expected Form XObject for each page geometry
(rebuilt by the engine's own builder in a scratch file), and a content scan that says whether a page's own
content leaves the graphics state balanced and whether it paints areas (which could hide an underlay)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pikepdf

from docfence.core.policy import WatermarkSpec
from docfence.engines.geometry import PageGeometry
from docfence.engines.vector import ARTIFACT_BDC, NAME_PREFIX, _Builder

_NAME_RE = re.compile(re.escape(NAME_PREFIX.encode("ascii")) + rb"\d+x*")
# Literal strings with balanced parentheses (one nesting level), hex strings and comments: removed before
# operators are looked for, so "(q)" in text is not a save. Anything left that still has a parenthesis is
# deeper nesting than this reads: the scan then says "unknown" and the page is rendered instead.
_STRINGS_RE = re.compile(  # possessive quantifiers: no backtracking, about 3x faster on text-dense pages
    rb"\((?:[^\\()]++|\\.|\((?:[^\\()]++|\\.)*+\))*+\)|<[0-9A-Fa-f\s]*+>|%[^\r\n]*+", re.S
)
# An operator starts after whitespace or a delimiter other than "/" (which starts a name: "/q" is not an
# operator) and ends at whitespace or any delimiter.
_BEFORE = rb"\s\[\]<>(){}"
_AFTER = rb"\s\[\]<>(){}/%"
_PAINT_RE = re.compile(
    rb"(?<![^" + _BEFORE + rb"])(?:f\*?|F|B\*?|b\*?|sh|Do|BI)(?![^" + _AFTER + rb"])"
)
_INLINE_IMAGE_RE = re.compile(rb"(?<![^" + _BEFORE + rb"])BI(?![^" + _AFTER + rb"])")
_Q_RE = re.compile(rb"[qQ]")  # few matches once strings are gone: boundaries are checked in Python
_BEFORE_SET = frozenset(b" \t\r\n\f\x00[]<>(){}")
_AFTER_SET = frozenset(b" \t\r\n\f\x00[]<>(){}/%")


def draw_bytes(name: str) -> bytes:
    return b"q " + ARTIFACT_BDC + b" " + name.encode("ascii") + b" Do EMC Q\n"


def expected_wrappers(spec: WatermarkSpec, name: str) -> tuple[bytes, bytes]:
    """(first, last) content stream of a marked page drawing the mark named `name`."""
    if spec.layer == "underlay":
        return draw_bytes(name) + b"q\n", b"Q\n"
    return b"q\n", b"Q\n" + draw_bytes(name)


def mark_name(first: bytes, last: bytes) -> str | None:
    """The mark's resource name as the wrappers draw it (None when neither names one)."""
    match = _NAME_RE.search(first) or _NAME_RE.search(last)
    return match.group(0).decode("ascii") if match else None


class ExpectedForms:
    """The engine's own builder, run in a scratch file: the exact Form XObject each geometry must get."""

    def __init__(self, spec: WatermarkSpec) -> None:
        self.pdf = pikepdf.new()
        self.builder = _Builder(self.pdf, spec)

    def form(self, geo: PageGeometry) -> pikepdf.Stream:
        return self.builder.geometry_form(geo)


@dataclass(frozen=True)
class ContentScan:
    """What a page's own content does to the graphics state, read without a full parse."""

    balanced: bool | None  # None: the scan could not tell (inline image, deep string nesting)
    paints: bool | None  # fills, images, shadings or XObjects: could cover an underlay


def scan_content(streams: list[pikepdf.Stream], paints_wanted: bool = True) -> ContentScan:
    """Scan the concatenated content (the PDF reads a page's streams as one); `paints` is only looked
    for when wanted (None otherwise)."""
    try:
        data = b"\n".join(s.read_bytes() for s in streams)
    except pikepdf.PdfError:
        return ContentScan(None, True)
    stripped = _STRINGS_RE.sub(b" ", data)
    if b"(" in stripped or b")" in stripped or (b"BI" in stripped and _INLINE_IMAGE_RE.search(stripped)):
        return ContentScan(None, True)
    depth, end = 0, len(stripped)
    for match in _Q_RE.finditer(stripped):
        at = match.start()
        inside_name = at and stripped[at - 1] not in _BEFORE_SET
        if inside_name or (at + 1 < end and stripped[at + 1] not in _AFTER_SET):
            continue  # part of a name or another operator
        depth += 1 if stripped[at] == 0x71 else -1  # 0x71: "q"
        if depth < 0:
            return ContentScan(False, True)
    return ContentScan(depth == 0, None if not paints_wanted else _PAINT_RE.search(stripped) is not None)


__all__ = [
    "NAME_PREFIX",
    "ContentScan",
    "ExpectedForms",
    "draw_bytes",
    "expected_wrappers",
    "mark_name",
    "scan_content",
]
