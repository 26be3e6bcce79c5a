"""Structural facts of one page used by the validator: page numbers by object id (so references compare
across renumbered files), whether the docfence watermark is drawn, and the visible size (raster)."""

from __future__ import annotations

import re
from typing import Any

import pikepdf

from docfence.engines.geometry import page_geometry

_MARK_RE = re.compile(rb"/Artifact\s*<<[^>]*/Subtype\s*/Watermark[^>]*>>\s*BDC\s*(/[^\s/]+)\s+Do\s+EMC")


PageIndex = dict[tuple[int, int], int]


def page_index(pages: list[pikepdf.Dictionary]) -> PageIndex:
    """Object id -> page number, so link targets compare across files whose objects were renumbered."""
    return {page.objgen: n for n, page in enumerate(pages, start=1) if page.is_indirect}


def has_watermark(page: pikepdf.Dictionary) -> bool:
    """The first or last content stream draws, as a watermark artifact, a Form XObject the page owns."""
    contents = page.get("/Contents")
    if not isinstance(contents, pikepdf.Array) or len(contents) < 2:
        return False
    res = page.get("/Resources")
    xobjects = res.get("/XObject") if isinstance(res, pikepdf.Dictionary) else None
    if not isinstance(xobjects, pikepdf.Dictionary):
        return False
    for stream in (contents[0], contents[len(contents) - 1]):
        if not isinstance(stream, pikepdf.Stream):
            continue
        match = _MARK_RE.search(stream.read_bytes())
        if match:
            form = xobjects.get(match.group(1).decode("latin-1"))
            if isinstance(form, pikepdf.Stream) and form.get("/Subtype") == pikepdf.Name.Form:
                return True
    return False


def visible_size_check(src: list[pikepdf.Dictionary], out: list[pikepdf.Dictionary]) -> dict[str, Any]:
    failures = []
    for i, (a, b) in enumerate(zip(src, out, strict=True)):
        wa, ha = page_geometry(a).display_size
        wb, hb = page_geometry(b).display_size
        if abs(wa - wb) > 0.05 or abs(ha - hb) > 0.05:
            failures.append(f"page {i + 1}: visible size changed")
    return {"name": "visible_size", "ok": not failures, "failures": failures[:10]}
