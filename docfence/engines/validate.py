"""Fidelity validation of an engine output against its input: a JSON-serialisable report of named checks,
each saying how it ran ("method") and on which pages ("pages", 1-based ranges).

Vector, standard: page count; structure proves, on every page, boxes and page entries kept, the original
content streams kept byte-for-byte inside q/Q, resources unchanged but for the fresh-named mark (so the
text is provably the same without extracting it), links and annotations kept, the mark the expected
Artifact on exactly the selected pages (see page_checks); pixels prove the mark visible where structure
cannot (content that may cover it) plus a sample; a second reader (libqpdf re-reading the bytes, and
poppler) opens the output.
Vector, exhaustive: all of that plus render and text-extract every page of both files.
Raster: page count, visible size, watermark pixels on every page (the input rendered, the output decoded
or rendered: raster_proof), second reader.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import Any

import pikepdf
import pypdfium2 as pdfium

from docfence.core.errors import ValidationFailed
from docfence.core.policy import SanitizePolicy, WatermarkSpec
from docfence.engines import page_checks
from docfence.engines import page_facts as facts
from docfence.engines.checks import (
    MAX_DETAILS,
    Check,
    bounded,
    check,
    explain,
    failure_message,
    merge_pages,
    page_ranges,
)
from docfence.engines.geometry import PageGeometry, page_geometry
from docfence.engines.mark_obscure import text_not_obscured
from docfence.engines.mark_pixels import coverage_mask
from docfence.engines.marks import MarkSet, PageMark
from docfence.engines.parallel import run_parallel, split, usable_cores
from docfence.engines.pixel_proof import (
    RENDER_PX,
    page_text,
    render,
    render_like,
    vector_pixel_problem,
)
from docfence.engines.raster_proof import RasterSides, page_problem
from docfence.engines.sanitize_residue import residue_check
from docfence.engines.second_reader import SecondReader

_PARALLEL_FROM_PAGES = 200  # below this, forking costs more than it saves
_PARALLEL_FROM_RENDERS = 8  # pages to render (both files) before splitting them across processes
_SAMPLE_PAGES = 6  # standard mode: pages rendered as a cross-check of the structural proof


def _open(data: bytes, password: str) -> pikepdf.Pdf:
    return pikepdf.open(io.BytesIO(data), password=password, inherit_page_attributes=False)


def validate(
    source: bytes,
    output: bytes,
    spec: MarkSet | WatermarkSpec,
    *,
    mode: str,
    password: str | None = None,
    dpi: int = 150,
    level: str = "standard",
    sanitize: SanitizePolicy | None = None,
) -> dict[str, Any]:
    """Compare `output` with `source`; returns {"ok", "mode", "level", "pages", "checks", "notes"}.

    `level` is the class's validation level: "standard" or "exhaustive" (see the module docstring);
    `spec` is the job's marks (a lone WatermarkSpec: one mark, its text drawn literally)."""
    marks = MarkSet.coerce(spec)
    pw = password or ""
    src = _open(source, pw)
    try:
        out = _open(output, pw)
    except pikepdf.PdfError:
        failed = check("output_opens", ["the output cannot be opened"])
        return {"ok": False, "mode": mode, "level": level, "pages": 0, "checks": [failed], "notes": []}
    src_pages, out_pages = [p.obj for p in src.pages], [p.obj for p in out.pages]
    # qpdf's content-stream parse is kept where pages are not proved byte-identical (exhaustive, raster)
    parse = level == "exhaustive" or mode != "vector"
    # a long output's libqpdf read runs in a forked process beside the page proof, as qpdf used to
    background = len(out_pages) >= _PARALLEL_FROM_PAGES and usable_cores() > 1
    out_geos = [page_geometry(p) for p in out_pages]  # once: the page proof and the second reader use them
    reader = SecondReader(output, password, len(out_pages), parse_content=parse, background=background,
                          source=source)
    # nothing of a kind the sanitiser strips may be left (engines/sanitize*); runs beside the page proof
    residue = (lambda: residue_check(out, sanitize)) if sanitize is not None else None
    try:
        out_side = (out_pages, out_geos)
        checks, notes = _checks(source, output, pw, marks, src_pages, out_side, mode, dpi, level, residue)
    finally:
        second = reader.finish(out_geos)
    checks.insert(0, _opens_cleanly(out))
    checks.append(second if checks[1]["ok"] else check("second_reader", [], skipped="page count differs"))
    report = {
        "ok": all(c["ok"] for c in checks),
        "mode": mode,
        "level": level,
        "pages": len(out_pages),
        "checks": checks,
        "notes": notes,
    }
    if not report["ok"]:
        explain(report)  # every failed check says what differed ("details"); only on failure
    return report


def _opens_cleanly(out: pikepdf.Pdf) -> Check:
    """Our writer's output must read without repair: a reader that had to rebuild the cross-reference
    table (a truncated or damaged file) is a failure even when every page was recovered."""
    warnings = out.get_warnings()
    failures = [f"the output needed repair to be read ({len(warnings)} reader warnings)"] if warnings else []
    return check("output_opens", failures, reader="qpdf (pikepdf)")


def _checks(
    source: bytes,
    output: bytes,
    pw: str,
    spec: MarkSet,
    src_pages: list[pikepdf.Dictionary],
    out: tuple[list[pikepdf.Dictionary], list[PageGeometry]],
    mode: str,
    dpi: int,
    level: str,
    side: Callable[[], Check] | None,
) -> tuple[list[Check], list[str]]:
    out_pages, out_geos = out
    count = len(src_pages)
    checks: list[Check] = [
        check(
            "page_count",
            [] if count == len(out_pages) else ["page count differs"],
            input=count,
            output=len(out_pages),
        ),
    ]
    if not checks[0]["ok"]:
        return checks + ([side()] if side else []), []
    selected = [spec.selected(i, count) for i in range(count)]
    geos = [page_geometry(p) for p in src_pages]
    if mode != "vector":
        checks.append(facts.visible_size_check(src_pages, out_pages))
        pages = range(count)
        sample = frozenset(pages if level == "exhaustive" else sample_pages(geos, selected))
        raster = RasterSides(out_pages, out_geos, sample, dpi)
        checks += split_pixel_checks(source, output, pw, selected, mode, spec, geos, pages, dpi, raster)
        checks[-1]["method"] = raster.method()
        checks.append(text_not_obscured(source, pw, spec, geos))  # a raster output has no text of its own
        checks += [side()] if side else []
        return checks, ["raster mode: text, links, annotations and form fields are intentionally not kept"]
    pair = page_checks.Pair(src_pages, out_pages, spec, selected, geos, out_geos)
    findings, side_check = prove_pages(pair, side)
    checks += structure_report(findings, count, spec)
    checks.append(mark_visible_alone(geos, selected, spec))
    checks.append(text_not_obscured(output, pw, spec, out_geos))
    render = range(count) if level == "exhaustive" else pixel_pages(findings, geos, selected)
    checks += split_pixel_checks(source, output, pw, selected, mode, spec, geos, render, None)
    checks[-1]["why"] = "every page" if level == "exhaustive" else _why(findings, render)
    return checks + ([side_check] if side_check else []), []


def prove_pages(
    pair: page_checks.Pair, side: Callable[[], Check] | None = None
) -> tuple[page_checks.RangeFindings, Check | None]:
    """Structural proof of every page, split across the usable cores for long documents, with `side`
    (a whole-document check) run at the same time; a piece that dies fails its checks closed."""
    count = len(pair.src_pages)
    parallel = count >= _PARALLEL_FROM_PAGES
    ranges = split(count, usable_cores() if parallel else 1)
    tasks: list[Callable[[], Any]] = [functools.partial(page_checks.prove_range, pair, *r) for r in ranges]
    if side is not None:
        tasks.insert(0, side)
    results = run_parallel(tasks) if parallel else [task() for task in tasks]
    side_check: Check | None = None
    if side is not None:
        side_check = results.pop(0) or check("sanitised", ["the residue check did not complete"])
    parts: list[page_checks.RangeFindings | None] = results
    done = [p for p in parts if p is not None]
    merged = page_checks.merge(done)
    for (first, stop), part in zip(ranges, parts, strict=True):
        if part is None:
            lost = f"pages {page_ranges(range(first, stop))}: structural checks did not complete"
            for name in page_checks.STRUCTURE_CHECKS:
                merged.failures.setdefault(name, []).insert(0, lost)
                merged.details.setdefault(name, []).insert(0, lost)
    return merged, side_check


def structure_report(found: page_checks.RangeFindings, count: int, spec: MarkSet) -> list[Check]:
    every = page_ranges(range(count))
    methods = {
        page_checks.GEOMETRY: "page boxes and rotation, inherited values resolved",
        page_checks.ANNOTS: "annotation dictionaries equal, link targets compared by page number",
        page_checks.PAGE_DICT: "every other page entry equal",
        page_checks.FONTS: "font resources equal (dictionaries and font programs)",
        page_checks.CONTENT: "original content streams byte-identical, inside q/Q",
        page_checks.RESOURCES: "resources equal except the added fresh-named mark",
        page_checks.TEXT: "structure: same content streams and same resources, so the same text",
        page_checks.MARK: "q/Q-isolated Artifacts drawing each mark's expected form (with its page's "
                          "text), each only on its own pages",
    }
    checks = []
    for name in page_checks.STRUCTURE_CHECKS:
        details: dict[str, Any] = {"method": methods[name], "pages": every}
        if name == page_checks.ANNOTS:
            details["count"] = found.links
        if name == page_checks.MARK:
            details["pages_marked"] = sum(spec.selected(i, count) for i in range(count))
            details["marks"] = len(spec.marks)
        checks.append(check(name, found.failures.get(name, []), found.details.get(name), **details))
    return checks


def mark_visible_alone(geos: list[PageGeometry], selected: list[bool], spec: MarkSet) -> Check:
    """The marks the structure proof found on each page are the builder's forms for that geometry;
    render each mark alone, once per geometry (a mark with `{page}`: as on the first page of that
    geometry), on a blank page of the same boxes: it must leave ink inside the visible box (it clips to
    the CropBox), or the layout put it where no reader shows it."""
    failures: list[str] = []
    count = len(geos)
    groups: dict[tuple[object, ...], tuple[PageGeometry, PageMark, list[int]]] = {}
    for i, geo in enumerate(geos):
        if not selected[i]:
            continue
        for mark in spec.on_page(i, count):
            key = (geo.crop, geo.rotate, mark.index, mark.spec)  # a page's fit is a layout of its own
            groups.setdefault(key, (geo, mark, []))[2].append(i)
    for geo, mark, pages in groups.values():
        width, height = geo.display_size
        scale = RENDER_PX * 2 / max(width, height, 1.0)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        if coverage_mask(geo, (mark,), size).point(lambda v: 255 if v > 128 else 0).getbbox() is None:
            failures.append(f"pages {page_ranges(pages)}: mark {mark.index + 1} leaves no ink "
                            "inside the visible box")
    return check(
        "watermark_in_visible_box",
        failures,
        method="each mark's form rendered alone once per page geometry",
        geometries=len({key[:2] for key in groups}),
        pages=page_ranges(sorted({i for _, _, pages in groups.values() for i in pages})),
    )


def pixel_pages(
    found: page_checks.RangeFindings, geos: list[PageGeometry], selected: list[bool]
) -> list[int]:
    """Pages whose mark only pixels can prove, plus a sample: first, last, one per geometry."""
    return sorted(set(sample_pages(geos, selected)) | set(found.needs_pixels))


def sample_pages(geos: list[PageGeometry], selected: list[bool]) -> list[int]:
    """First, last and one page per geometry and selection (at most _SAMPLE_PAGES)."""
    sample: list[int] = []
    seen: set[tuple[object, ...]] = set()
    for i, geo in enumerate(geos):
        key = (geo.crop, geo.rotate, selected[i])
        if key not in seen and len(sample) < _SAMPLE_PAGES - 1:
            seen.add(key)
            sample.append(i)
    sample.append(len(geos) - 1)
    return sorted(set(sample))


def _why(found: page_checks.RangeFindings, render: list[int] | range) -> dict[str, str]:
    reasons: dict[str, list[int]] = {}
    for i in render:
        reason = found.needs_pixels.get(i, "sample (cross-check of the structural proof)")
        reasons.setdefault(reason, []).append(i)
    return {reason: page_ranges(pages) for reason, pages in reasons.items()}


def split_pixel_checks(
    source: bytes,
    output: bytes,
    pw: str,
    selected: list[bool],
    mode: str,
    spec: MarkSet,
    geos: list[PageGeometry],
    pages: list[int] | range,
    dpi: int | None = None,
    raster: RasterSides | None = None,
) -> list[Check]:
    """pixel_checks over `pages`, split across the usable cores when there are enough pages to pay for
    the forks (raster validation, exhaustive mode); a piece that dies fails the checks closed."""
    pages = list(pages)
    cores = usable_cores() if len(pages) >= _PARALLEL_FROM_RENDERS else 1
    parts = [pages[a:b] for a, b in split(len(pages), cores)]
    if len(parts) <= 1:
        return pixel_checks(source, output, pw, selected, mode, spec, geos, pages, dpi, raster)
    run = functools.partial(pixel_checks, source, output, pw, selected, mode, spec, geos)
    results = run_parallel([functools.partial(run, part, dpi, raster) for part in parts])
    names = ["text_extracted", "watermark_rendered"] if mode == "vector" else ["watermark_rendered"]
    merged: dict[str, Check] = {}
    for part, result in zip(parts, results, strict=True):
        lost = [check(name, [f"pages {page_ranges(part)}: did not complete"]) for name in names]
        for piece in result or lost:
            into = merged.setdefault(piece["name"], {**piece, "failures": [], "details": []})
            into["ok"] = into["ok"] and piece["ok"]
            into["failures"] = (into["failures"] + piece["failures"])[:MAX_DETAILS]
            into["details"] = into["details"] + piece.get("details", [])
    for item in merged.values():
        item["pages"] = page_ranges(pages)
        if item["ok"]:
            del item["details"]
        else:
            item["details"] = bounded(merge_pages(item["details"]))
    return list(merged.values())


def pixel_checks(
    source: bytes,
    output: bytes,
    pw: str,
    selected: list[bool],
    mode: str,
    spec: MarkSet,
    geos: list[PageGeometry],
    pages: list[int] | range,
    dpi: int | None = None,
    raster: RasterSides | None = None,
) -> list[Check]:
    """Render `pages` of both at low resolution (and extract their text once): the mark must change
    selected pages and only those; text must match."""
    src_doc = pdfium.PdfDocument(source, password=pw or None)
    try:
        out_doc = pdfium.PdfDocument(output, password=pw or None)
    except pdfium.PdfiumError as exc:
        src_doc.close()
        return [check("watermark_rendered", [f"the renderer cannot open the output: {type(exc).__name__}"])]
    try:
        src_doc.init_forms()
        out_doc.init_forms()
        text_failures, mark_failures = [], []
        for i in pages:
            same_text, problem = _compare_page(
                src_doc, out_doc, i, selected[i], mode, spec, geos[i], dpi, raster)
            if not same_text:
                text_failures.append(f"page {i + 1}: extracted text differs")
            if problem:
                mark_failures.append(f"page {i + 1}: {problem}")
        where = page_ranges(pages)
        checks = [check("watermark_rendered", mark_failures, renderer="pdfium", pages=where)]
        if mode == "vector":
            checks.insert(0, check("text_extracted", text_failures, extractor="pdfium", pages=where))
        return checks
    except pdfium.PdfiumError as exc:
        return [check("watermark_rendered", [f"renderer failed: {type(exc).__name__}"], pages="")]
    finally:
        out_doc.close()
        src_doc.close()


def _compare_page(
    src_doc: pdfium.PdfDocument,
    out_doc: pdfium.PdfDocument,
    index: int,
    is_selected: bool,
    mode: str,
    spec: MarkSet,
    geo: PageGeometry,
    dpi: int | None,
    raster: RasterSides | None = None,
) -> tuple[bool, str | None]:
    """(same extracted text, pixel problem or None) for one page; both pages are closed afterwards."""
    a, b = src_doc[index], out_doc[index]
    try:
        same_text = mode != "vector" or page_text(a) == page_text(b)
        drawn = spec.on_page(index, len(out_doc))
        if mode == "vector":
            img_a = render(a, dpi)
            img_b = render_like(b, img_a.size) if dpi else render(b)
            mask = coverage_mask(geo, drawn, img_a.size) if is_selected else None
            return same_text, vector_pixel_problem(img_a, img_b, is_selected, mask)
        assert raster is not None, "raster pages are compared through raster_proof"
        return same_text, page_problem(raster, index, a, b, drawn if is_selected else (), geo)
    finally:
        a.close()
        b.close()


def require_valid(report: dict[str, Any]) -> None:
    """Raise ValidationFailed (with `.report`) unless every check passed; nothing may be published."""
    if report["ok"]:
        return
    # the message names the checks and what differed (no document text: engines/checks.py)
    raise ValidationFailed(failure_message(report), report=report)


__all__ = ["require_valid", "validate"]
