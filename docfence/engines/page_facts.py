"""Structural facts of one page used by the validator: boxes and rotation, annotations and link targets,
fonts, and whether the docfence watermark is drawn. Values are comparable across two files."""

from __future__ import annotations

import re
from typing import Any

import pikepdf

from docfence.engines.geometry import as_box, inherited, page_geometry

_BOXES = ("/MediaBox", "/CropBox", "/BleedBox", "/TrimBox", "/ArtBox")
_MARK_RE = re.compile(rb"/Artifact\s*<<[^>]*/Subtype\s*/Watermark[^>]*>>\s*BDC\s*(/[^\s/]+)\s+Do\s+EMC")


def page_boxes(page: pikepdf.Dictionary) -> tuple[Any, ...]:
    boxes = tuple(as_box(inherited(page, key)) for key in _BOXES)
    return (*boxes, page_geometry(page).rotate)


PageIndex = dict[tuple[int, int], int]


def page_index(pages: list[pikepdf.Dictionary]) -> PageIndex:
    """Object id -> page number, so link targets compare across files whose objects were renumbered."""
    return {page.objgen: n for n, page in enumerate(pages, start=1) if page.is_indirect}


def _page_ref(value: pikepdf.Object, index: PageIndex) -> str:
    if isinstance(value, pikepdf.Dictionary):
        return f"page {index.get(value.objgen, 0)}" if value.is_indirect else "dict"
    return repr(value)[:200]


def _target(annot: pikepdf.Dictionary, index: PageIndex) -> tuple[str, ...]:
    action = annot.get("/A")
    if isinstance(action, pikepdf.Dictionary):
        kind = str(action.get("/S", ""))
        if "/URI" in action:
            return (kind, str(action.URI))
        dest = action.get("/D")
    else:
        kind, dest = "", annot.get("/Dest")
    if isinstance(dest, pikepdf.Array):
        return (kind, *(_page_ref(v, index) for v in dest))
    return (kind, str(dest) if dest is not None else "")


def annotation_facts(page: pikepdf.Dictionary, index: PageIndex) -> list[tuple[Any, ...]]:
    annots = page.get("/Annots")
    if not isinstance(annots, pikepdf.Array):
        return []
    found = []
    for annot in annots:
        if not isinstance(annot, pikepdf.Dictionary):
            continue
        box = as_box(annot.get("/Rect"))
        rect = tuple(round(v, 2) for v in box) if box else None
        field = (str(annot.get("/T", "")), str(annot.get("/V", ""))[:200])
        found.append((str(annot.get("/Subtype", "")), rect, _target(annot, index), field))
    return found


def font_facts(page: pikepdf.Dictionary) -> list[tuple[str, str]]:
    res = inherited(page, "/Resources")
    font_dict = res.get("/Font") if isinstance(res, pikepdf.Dictionary) else None
    if not isinstance(font_dict, pikepdf.Dictionary):
        return []
    out = []
    for key, font in font_dict.items():
        base = font.get("/BaseFont", "") if isinstance(font, pikepdf.Dictionary) else ""
        out.append((str(key), str(base)))
    return sorted(out)


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
