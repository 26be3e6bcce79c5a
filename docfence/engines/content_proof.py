"""Structural equality of PDF objects across two files (input and output), so the validator can prove by
structure that page content, resources and page attributes were kept: equal streams (raw bytes and
dictionary, or decoded bytes when the writer recompressed), dictionaries and arrays, with page
references compared by page number because the writer renumbers objects; and, when they differ, where and
how (`difference`), told in names, numbers, counts, object and page numbers, never a string's or a
stream's bytes (which may be document text)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pikepdf

PageIndex = dict[tuple[int, int], int]
_MAX_DEPTH = 100  # deeper nesting is reported as "differs": fail closed rather than recurse without bound
_REAL_TOLERANCE = Decimal("0.00001")  # the precision qpdf writes reals with
_REF_RE = re.compile(rb"\d\s+\d+\s+R\b")
_STREAM_SKIP = frozenset({"/Length"})
_FILTER_KEYS = frozenset({"/Length", "/Filter", "/DecodeParms", "/DL"})
_DIFF_DEPTH = 4  # how far `difference` walks in before it describes the two values it reached
_NAME_CHARS = 40


class Same:
    """`same(a, b)`: a (from the input) and b (from the output) hold the same PDF value.

    Results for indirect objects are remembered by object-number pair, so a font or resource dictionary
    shared by 2,000 pages is compared once. A cycle is assumed equal while it is being compared
    (co-inductive equality), which is sound: any difference on the cycle is still found on its path."""

    def __init__(self, src_pages: PageIndex | None = None, out_pages: PageIndex | None = None) -> None:
        self.src_pages = src_pages or {}
        self.out_pages = out_pages or {}
        self.memo: dict[tuple[tuple[int, int], tuple[int, int]], bool] = {}

    def __call__(self, a: Any, b: Any) -> bool:
        return self._same(a, b, 0)

    def _same(self, a: Any, b: Any, depth: int) -> bool:
        if depth > _MAX_DEPTH:
            return False
        if not isinstance(a, pikepdf.Object) or not isinstance(b, pikepdf.Object):
            return _same_scalar(a, b)
        if a.is_indirect and b.is_indirect:
            key = (a.objgen, b.objgen)
            known = self.memo.get(key)
            if known is not None:
                return known
            if a.objgen in self.src_pages:  # a page: the same page number, never a walk into the page tree
                result = self.out_pages.get(b.objgen) == self.src_pages[a.objgen]
                self.memo[key] = result
                return result
            self.memo[key] = True
            result = self._direct(a, b, depth)
            self.memo[key] = result
            return result
        if a.is_indirect != b.is_indirect and a.objgen in self.src_pages:
            return False
        return self._direct(a, b, depth)

    def _direct(self, a: pikepdf.Object, b: pikepdf.Object, depth: int) -> bool:
        if isinstance(a, pikepdf.Stream):
            return isinstance(b, pikepdf.Stream) and self._stream(a, b, depth)
        if isinstance(a, pikepdf.Dictionary | pikepdf.Array) and _same_text(a, b):
            return True
        if isinstance(a, pikepdf.Dictionary):
            return isinstance(b, pikepdf.Dictionary) and self._dict(a, b, depth, frozenset())
        if isinstance(a, pikepdf.Array):
            return (
                isinstance(b, pikepdf.Array)
                and len(a) == len(b)
                and all(self._same(x, y, depth + 1) for x, y in zip(a, b, strict=True))
            )
        if isinstance(b, pikepdf.Stream | pikepdf.Dictionary | pikepdf.Array):
            return False
        return a._type_code == b._type_code and bool(a == b)

    def _dict(self, a: pikepdf.Object, b: pikepdf.Object, depth: int, skip: frozenset[str]) -> bool:
        keys = set(a.keys()) - skip
        if keys != set(b.keys()) - skip:
            return False
        return all(self._same(a[k], b[k], depth + 1) for k in sorted(keys))

    def _stream(self, a: pikepdf.Stream, b: pikepdf.Stream, depth: int) -> bool:
        if not self._dict(a.stream_dict, b.stream_dict, depth, _STREAM_SKIP):
            return self._decoded_same(a, b, depth)
        if a.read_raw_bytes() == b.read_raw_bytes():
            return True
        return self._decoded_same(a, b, depth)

    def _decoded_same(self, a: pikepdf.Stream, b: pikepdf.Stream, depth: int) -> bool:
        """A writer may recompress a stream: then the decoded bytes and the non-filter keys must match."""
        if not self._dict(a.stream_dict, b.stream_dict, depth, _FILTER_KEYS):
            return False
        try:
            return a.read_bytes() == b.read_bytes()
        except pikepdf.PdfError:
            return False


def _same_text(a: pikepdf.Object, b: pikepdf.Object) -> bool:
    """Fast path: a dictionary or array holding no indirect reference, written identically, is equal.
    (With a reference inside, object numbers differ between the files: the caller walks it instead.)"""
    text = a.unparse(resolved=True)
    return text == b.unparse(resolved=True) and _REF_RE.search(text) is None


def _same_scalar(a: Any, b: Any) -> bool:
    """Numbers compare by value (a writer may print 595.0 as 595); booleans and null by identity."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, int | float | Decimal) and isinstance(b, int | float | Decimal):
        return abs(Decimal(a) - Decimal(b)) <= _REAL_TOLERANCE
    return False


def stream_list(contents: Any) -> list[Any] | None:
    """A page's /Contents as a list of streams; None when it is neither a stream nor an array of them."""
    if contents is None:
        return []
    if isinstance(contents, pikepdf.Stream):
        return [contents]
    if isinstance(contents, pikepdf.Array):
        items = list(contents)
        return items if all(isinstance(s, pikepdf.Stream) for s in items) else None
    return None


def difference(same: Same, a: Any, b: Any, path: str, depth: int = 0) -> str:
    """Where and how `b` (the output's) differs from `a` (the input's), for a value `same` judged
    different: "/Annots 12 → 11", "/Annots[2]/Rect [0 0 10 10] → [0 0 12 10]", "/Font: /F1 removed,
    /F9 added". Walks into the first differing entry (at most _DIFF_DEPTH deep), then describes both.
    Failure path only: it costs a second comparison of what already differed."""
    if depth < _DIFF_DEPTH and isinstance(a, pikepdf.Object) and isinstance(b, pikepdf.Object):
        if isinstance(a, pikepdf.Stream) and isinstance(b, pikepdf.Stream):
            return _stream_difference(same, a, b, path, depth)
        if isinstance(a, pikepdf.Array) and isinstance(b, pikepdf.Array) and not _short_numbers(a):
            if len(a) != len(b):
                return f"{path} {len(a)} → {len(b)}"
            for k, (x, y) in enumerate(zip(a, b, strict=True)):
                if not same(x, y):
                    return difference(same, x, y, f"{path}[{k}]", depth + 1)
        if _is_dict(a) and _is_dict(b):
            return _dict_difference(same, a, b, path, depth, frozenset())
    return f"{path} {describe(a, same.src_pages)} → {describe(b, same.out_pages)}"


def _dict_difference(
    same: Same, a: pikepdf.Object, b: pikepdf.Object, path: str, depth: int, skip: frozenset[str]
) -> str:
    keys_a, keys_b = set(a.keys()) - skip, set(b.keys()) - skip
    changed = [f"{_name(k)} removed" for k in sorted(keys_a - keys_b)]
    changed += [f"{_name(k)} added" for k in sorted(keys_b - keys_a)]
    if changed:
        return f"{path}: {', '.join(changed[:4])}{', …' if len(changed) > 4 else ''}"
    for key in sorted(keys_a):
        if not same(a[key], b[key]):
            return difference(same, a[key], b[key], f"{path}{_name(key)}", depth + 1)
    return f"{path} {describe(a, same.src_pages)} → {describe(b, same.out_pages)}"


def _stream_difference(same: Same, a: pikepdf.Stream, b: pikepdf.Stream, path: str, depth: int) -> str:
    """The stream dictionaries' first difference (filters aside), else the decoded lengths."""
    if not same._dict(a.stream_dict, b.stream_dict, depth, _FILTER_KEYS):
        return _dict_difference(same, a.stream_dict, b.stream_dict, path, depth, _FILTER_KEYS)
    return f"{path} {describe(a, same.src_pages)} → {describe(b, same.out_pages)}"


def describe(value: Any, pages: PageIndex | None = None) -> str:
    """A PDF value as a report may show it: numbers, booleans, names, short arrays of numbers, a page's
    number, else its kind and size (and object number): never a string's or a stream's content."""
    if value is None:
        return "absent"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return _number(value)
    if not isinstance(value, pikepdf.Object):
        return type(value).__name__
    if pages and value.is_indirect and value.objgen in pages:
        return f"page {pages[value.objgen]}"
    where = f" (object {value.objgen[0]})" if value.is_indirect else ""
    if isinstance(value, pikepdf.Name):
        return _name(str(value))
    if isinstance(value, pikepdf.String):
        return f"a string of {len(bytes(value))} bytes"
    if isinstance(value, pikepdf.Array):
        if _short_numbers(value):
            return "[" + " ".join(describe(v) for v in value) + "]" + where
        return f"an array of {len(value)}{where}"
    if isinstance(value, pikepdf.Stream):
        return f"a stream of {_decoded_length(value)} bytes{where}"
    if _is_dict(value):
        kind = value.get("/Subtype") or value.get("/Type")
        what = f"a {_name(str(kind))} dictionary" if isinstance(kind, pikepdf.Name) else "a dictionary"
        return f"{what} of {len(value.keys())} entries{where}"
    return "null" if value._type_code == pikepdf.ObjectType.null else "a value"


def _is_dict(value: Any) -> bool:
    return isinstance(value, pikepdf.Dictionary) and not isinstance(value, pikepdf.Stream)


def _short_numbers(value: pikepdf.Array) -> bool:
    return len(value) <= 6 and all(
        isinstance(v, int | float | Decimal) and not isinstance(v, bool) for v in value)


def _number(value: int | float | Decimal) -> str:
    text = f"{Decimal(str(value)).normalize():f}"
    return "0" if text in ("-0", "") else text


def _name(name: str) -> str:
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"


def _decoded_length(stream: pikepdf.Stream) -> int:
    try:
        return len(stream.read_bytes())
    except pikepdf.PdfError:
        return len(stream.read_raw_bytes())


__all__ = ["PageIndex", "Same", "describe", "difference", "stream_list"]
