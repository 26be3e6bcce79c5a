"""Fidelity validation of an engine output against its input: a JSON-serialisable report of named checks.

Vector: page count, boxes and rotation, text, links/annotations, fonts, watermark (structure and pixels),
second reader (qpdf and poppler). Raster: page count, visible size, watermark pixels, second reader.
"""

from __future__ import annotations

import io
from typing import Any

import pikepdf
import pypdfium2 as pdfium
from PIL import Image, ImageChops, ImageFilter, ImageOps, ImageStat

from docfence.core.errors import ValidationFailed
from docfence.core.policy import SanitizePolicy, WatermarkSpec
from docfence.engines import page_facts as facts
from docfence.engines.geometry import PageGeometry, page_geometry
from docfence.engines.sanitize_residue import residue_check
from docfence.engines.second_reader import second_reader_check
from docfence.engines.wm_layer import coverage_mask

Check = dict[str, Any]
_RENDER_PX = 110.0  # longest side of the low-resolution comparison render
_MAX_DETAILS = 10
_RASTER_NOISE = 8.0  # mean difference a re-rasterised page may show from resampling alone


def check(name: str, failures: list[str], **details: Any) -> Check:
    return {"name": name, "ok": not failures, "failures": failures[:_MAX_DETAILS], **details}


def _open(data: bytes, password: str) -> pikepdf.Pdf:
    return pikepdf.open(io.BytesIO(data), password=password, inherit_page_attributes=False)


def validate(
    source: bytes,
    output: bytes,
    spec: WatermarkSpec,
    *,
    mode: str,
    password: str | None = None,
    dpi: int = 150,
    sanitize: SanitizePolicy | None = None,
) -> dict[str, Any]:
    """Compare `output` with `source`; returns {"ok", "mode", "pages", "checks", "notes"}."""
    pw = password or ""
    src = _open(source, pw)
    try:
        out = _open(output, pw)
    except pikepdf.PdfError:
        failed = check("output_opens", ["the output cannot be opened"])
        return {"ok": False, "mode": mode, "pages": 0, "checks": [failed], "notes": []}
    src_pages, out_pages = [p.obj for p in src.pages], [p.obj for p in out.pages]
    checks: list[Check] = [
        check(
            "page_count",
            [] if len(src_pages) == len(out_pages) else ["page count differs"],
            input=len(src_pages),
            output=len(out_pages),
        ),
    ]
    notes: list[str] = []
    if checks[0]["ok"]:
        selected = [spec.page_selected(i, len(src_pages)) for i in range(len(src_pages))]
        if mode == "vector":
            checks += vector_structure_checks(src_pages, out_pages, selected)
        else:
            checks.append(facts.visible_size_check(src_pages, out_pages))
            notes.append("raster mode: text, links, annotations and form fields are intentionally not kept")
        geos = [page_geometry(p) for p in src_pages]
        raster_dpi = dpi if mode == "raster" else None
        checks += pixel_checks(source, output, pw, selected, mode, spec, geos, raster_dpi)
        checks.append(second_reader_check(output, password, [page_geometry(p) for p in out_pages]))
    if sanitize is not None:
        checks.append(residue_check(out, sanitize))  # nothing of a stripped kind left (engines/sanitize*)
    return {
        "ok": all(c["ok"] for c in checks),
        "mode": mode,
        "pages": len(out_pages),
        "checks": checks,
        "notes": notes,
    }


def vector_structure_checks(
    src_pages: list[pikepdf.Dictionary], out_pages: list[pikepdf.Dictionary], selected: list[bool]
) -> list[Check]:
    geometry, annots, fonts, marks = [], [], [], []
    src_index, out_index = facts.page_index(src_pages), facts.page_index(out_pages)
    link_count = 0
    for i, (a, b) in enumerate(zip(src_pages, out_pages, strict=True)):
        n = i + 1
        if facts.page_boxes(a) != facts.page_boxes(b):
            geometry.append(f"page {n}: page boxes or rotation changed")
        src_annots = facts.annotation_facts(a, src_index)
        link_count += len(src_annots)
        if src_annots != facts.annotation_facts(b, out_index):
            annots.append(f"page {n}: annotations or links changed")
        if facts.font_facts(a) != facts.font_facts(b):
            fonts.append(f"page {n}: fonts changed")
        if facts.has_watermark(b) != selected[i]:
            marks.append(f"page {n}: watermark {'missing' if selected[i] else 'unexpected'} (structure)")
    return [
        check("page_geometry", geometry),
        check("annotations_and_links", annots, count=link_count),
        check("fonts", fonts),
        check("watermark_structure", marks, pages_marked=sum(selected)),
    ]


def _render(page: pdfium.PdfPage, dpi: int | None = None) -> Image.Image:
    """Low-resolution render. For raster outputs, both sides are rendered at the raster DPI and then
    area-averaged, so hairlines (one device pixel at any scale) weigh the same in input and output."""
    w, h = page.get_size()
    scale = max(_RENDER_PX / max(w, h, 1.0), 1.0 if min(w, h) < 200 else 0.0)
    if dpi is None:
        return page.render(scale=scale, draw_annots=True, may_draw_forms=True).to_pil().convert("RGB")
    fine = max(dpi / 72.0, scale)
    factor = max(1, round(fine / scale))
    img = page.render(scale=fine, draw_annots=True, may_draw_forms=True).to_pil().convert("RGB")
    return img.reduce(factor)


def _render_like(page: pdfium.PdfPage, size: tuple[int, int]) -> Image.Image:
    """An image-only raster page, rendered straight at the comparison size (pdfium area-samples images)."""
    scale = size[0] / max(page.get_size()[0], 1.0)
    img = page.render(scale=scale, draw_annots=True).to_pil().convert("RGB")
    return img if img.size == size else img.resize(size)


def changed_pixels(before: Image.Image, after: Image.Image, threshold: int) -> int:
    if before.size != after.size:
        after = after.resize(before.size)
    diff = ImageChops.difference(before, after).convert("L")
    return int(diff.point(lambda v: 255 if v > threshold else 0).histogram()[255])


def pixel_checks(
    source: bytes,
    output: bytes,
    pw: str,
    selected: list[bool],
    mode: str,
    spec: WatermarkSpec,
    geos: list[PageGeometry],
    dpi: int | None = None,
) -> list[Check]:
    """Render both at low resolution: the mark must change selected pages and only those; text must match."""
    src_doc = pdfium.PdfDocument(source, password=pw or None)
    out_doc = pdfium.PdfDocument(output, password=pw or None)
    try:
        src_doc.init_forms()
        out_doc.init_forms()
        text_failures, mark_failures = [], []
        for i, is_selected in enumerate(selected):
            same_text, problem = _compare_page(src_doc, out_doc, i, is_selected, mode, spec, geos[i], dpi)
            if not same_text:
                text_failures.append(f"page {i + 1}: extracted text differs")
            if problem:
                mark_failures.append(f"page {i + 1}: {problem}")
        checks = [check("watermark_rendered", mark_failures, renderer="pdfium")]
        if mode == "vector":
            checks.insert(0, check("text_preserved", text_failures, extractor="pdfium"))
        return checks
    except pdfium.PdfiumError as exc:
        return [check("watermark_rendered", [f"renderer failed: {type(exc).__name__}"])]
    finally:
        out_doc.close()
        src_doc.close()


def _compare_page(
    src_doc: pdfium.PdfDocument,
    out_doc: pdfium.PdfDocument,
    index: int,
    is_selected: bool,
    mode: str,
    spec: WatermarkSpec,
    geo: PageGeometry,
    dpi: int | None,
) -> tuple[bool, str | None]:
    """(same extracted text, pixel problem or None) for one page; both pages are closed afterwards."""
    a, b = src_doc[index], out_doc[index]
    try:
        same_text = mode != "vector" or _text(a) == _text(b)
        img_a = _render(a, dpi)
        img_b = _render_like(b, img_a.size) if dpi else _render(b)
        if mode == "vector":
            return same_text, vector_pixel_problem(img_a, img_b, is_selected)
        if not is_selected:
            return same_text, raster_unselected_problem(img_a, img_b)
        return same_text, raster_pixel_problem(img_a, img_b, coverage_mask(geo, spec, img_a.size), spec)
    finally:
        a.close()
        b.close()


def vector_pixel_problem(before: Image.Image, after: Image.Image, selected: bool) -> str | None:
    """Vector: a selected page must visibly change; any other page must render identically."""
    changed = changed_pixels(before, after, 12)
    if selected and changed < 3:
        return "watermark not visible when rendered"
    if not selected and changed > 0:
        return "unselected page looks different"
    return None


def _diff(before: Image.Image, after: Image.Image) -> Image.Image:
    """Blurred difference: resampling of a re-rasterised page averages out, a watermark does not."""
    if before.size != after.size:
        after = after.resize(before.size)
    blur = ImageFilter.BoxBlur(2)
    return ImageChops.difference(before.filter(blur), after.filter(blur)).convert("L")


def raster_pixel_problem(
    before: Image.Image, after: Image.Image, mask: Image.Image, spec: WatermarkSpec
) -> str | None:
    """Raster: inside the watermark area the page must change clearly more than outside it."""
    region = mask.point(lambda v: 255 if v > 128 else 0)
    if region.getbbox() is None:
        return "watermark area is empty at validation resolution"
    diff = _diff(before, after)
    inside = ImageStat.Stat(diff, region).mean[0]
    outside_mask = ImageOps.invert(mask.point(lambda v: 255 if v > 8 else 0))
    outside = ImageStat.Stat(diff, outside_mask).mean[0] if outside_mask.getbbox() else 0.0
    if inside - outside < max(3.0, 24.0 * spec.opacity):
        return "watermark not visible when rendered"
    if outside > _RASTER_NOISE:
        return "page outside the watermark looks different"
    return None


def raster_unselected_problem(before: Image.Image, after: Image.Image) -> str | None:
    if ImageStat.Stat(_diff(before, after)).mean[0] > _RASTER_NOISE:
        return "unselected page looks different"
    return None


def _text(page: pdfium.PdfPage) -> str:
    textpage = page.get_textpage()
    try:
        return str(textpage.get_text_range())
    finally:
        textpage.close()


def require_valid(report: dict[str, Any]) -> None:
    """Raise ValidationFailed (with `.report`) unless every check passed; nothing may be published."""
    if report["ok"]:
        return
    failed = ", ".join(c["name"] for c in report["checks"] if not c["ok"])
    error = ValidationFailed(f"The output failed its fidelity validation ({failed}).")
    error.report = report  # type: ignore[attr-defined]
    raise error


__all__ = ["require_valid", "validate"]
