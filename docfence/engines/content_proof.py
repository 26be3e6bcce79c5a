"""Structural equality of PDF objects across two files (input and output), so the validator can prove by
structure that page content, resources and page attributes were kept: equal streams (raw bytes and
dictionary, or decoded bytes when the writer recompressed), dictionaries and arrays, with page
references compared by page number because the writer renumbers objects."""

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
        skip = frozenset({"/Length", "/Filter", "/DecodeParms", "/DL"})
        if not self._dict(a.stream_dict, b.stream_dict, depth, skip):
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


__all__ = ["PageIndex", "Same", "stream_list"]
