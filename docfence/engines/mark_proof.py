"""What the vector marks must look like in the output, for the validator to prove them by structure:
the exact wrapper streams around a page's own content, the expected Form XObject of each mark for each
page geometry and page text (rebuilt by the engine's own builder in a scratch file), and a content scan
that says whether a page's own content leaves the graphics state balanced and whether it paints areas
(which could hide an underlay)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pikepdf

from docfence.engines.content_proof import Same
from docfence.engines.geometry import PageGeometry
from docfence.engines.marks import PageMark
from docfence.engines.vector import NAME_PREFIX, FormParts, _Builder, draw_bytes, wrapper_bytes

_NAME_RE = re.compile(re.escape(NAME_PREFIX.encode("ascii")) + rb"(\d+)x*")
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


def expected_wrappers(marks: tuple[PageMark, ...], names: dict[int, str]) -> tuple[bytes, bytes] | None:
    """(first, last) content stream of a page drawing `marks` under the resource `names` found on it
    (mark index -> name); None when a mark has no name there (it is missing)."""
    if any(m.index not in names for m in marks):
        return None
    return wrapper_bytes(tuple((names[m.index], m.spec.layer) for m in marks))


def mark_names(first: bytes, last: bytes) -> dict[int, str]:
    """Mark index -> the resource name the wrappers draw it by (`/DfWm<index>x*`)."""
    names: dict[int, str] = {}
    for match in (*_NAME_RE.finditer(first), *_NAME_RE.finditer(last)):
        names.setdefault(int(match.group(1)), match.group(0).decode("ascii"))
    return names


class ExpectedForms:
    """The engine's own builder, run in a scratch file: the exact Form XObject each mark must get on a
    page of each geometry (and, for a mark with `{page}`, with that page's text)."""

    def __init__(self) -> None:
        self.pdf = pikepdf.new()
        self.builder = _Builder(self.pdf)

    def form(self, mark: PageMark, geo: PageGeometry) -> pikepdf.Stream:
        return self.builder.geometry_form(mark, geo)

    @staticmethod
    def _resources_match(parts: FormParts, res: object, same: Same) -> bool:
        if not isinstance(res, pikepdf.Dictionary) or set(res.keys()) != {"/ExtGState", "/XObject"}:
            return False
        states, xobjects = res.ExtGState, res.XObject
        if not isinstance(states, pikepdf.Dictionary) or set(states.keys()) != {"/DfGS"} \
                or not same(parts.state, states.DfGS):
            return False
        names = {k for k, _ in parts.xobjects}
        if not isinstance(xobjects, pikepdf.Dictionary) or set(xobjects.keys()) != names:
            return False
        return all(same(form, xobjects[k]) for k, form in parts.xobjects)

    def matches(self, mark: PageMark, geo: PageGeometry, actual: object, same: Same) -> bool:
        """`actual` is exactly the form the builder makes of `mark` for this page (used for marks drawn
        per page): checked part by part (keys, box, content bytes, the opacity state and the shared
        pieces it draws, those compared once per document through `same`'s memo) instead of making a
        scratch form per page and walking both."""
        if not isinstance(actual, pikepdf.Stream):
            return False
        d = actual.stream_dict
        if set(d.keys()) - _STREAM_KEYS != _FORM_KEYS or d.get("/Subtype") != pikepdf.Name.Form \
                or d.get("/Type") != pikepdf.Name.XObject:
            return False
        box = d.get("/BBox")
        if not isinstance(box, pikepdf.Array) or len(box) != 4 or any(
                abs(float(v) - round(w, 4)) > 1e-4 for v, w in zip(box, geo.crop, strict=True)):
            return False
        parts = self.builder.form_parts(mark, geo)
        res = d.get("/Resources")
        if parts.shared is not None:  # compared once per document: the pair is remembered
            if not same(parts.shared, res):
                return False
        elif not self._resources_match(parts, res, same):
            return False
        try:
            return actual.read_bytes() == parts.content
        except pikepdf.PdfError:
            return False


_STREAM_KEYS = frozenset({"/Length", "/Filter", "/DecodeParms"})
_FORM_KEYS = frozenset({"/Type", "/Subtype", "/BBox", "/Resources"})


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
    "mark_names",
    "scan_content",
]
