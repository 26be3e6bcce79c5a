"""Raster engine benchmark: `engines.watermark_document()` (render, encode, validate) in raster mode at
a DPI on one dense document, run in this process: pages/s (wall) and CPU ms per page (getrusage SELF +
CHILDREN, so the forked page ranges, validation pieces and pdfinfo are counted), with the engine's and
the validator's share; and the output size against RGB JPEG q85 of the same renders (the size target:
>= 2x smaller).

Run it once per tree, alternating, to compare code on a loaded machine:
    PYTHONPATH=/work/main python bench/raster.py /tmp/dense/corpus/doc_200p.pdf --runs 3
Prints one JSON object.

`--colours` adds, per page, the colour figure the raster validator holds to its bound: CIEDE2000 at the
99th percentile of the pixels outside the marks, between pdfium's render of the input and the output's
image as pikepdf decodes it, at the DPI (area-averaged to at most 150 DPI). The judge is always this
checkout's engines/colour_difference.py, whatever tree PYTHONPATH selects, so an older tree is measured
by the same formula. Without a PDF it runs the case of the report: one page of black Helvetica text
under the default red diagonal mark:
    PYTHONPATH=/work/main python bench/raster.py --colours --dpi 100 --runs 3
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # bench/queue.py shadows queue

import argparse
import importlib.util
import io
import json
import resource
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pikepdf
import pypdfium2 as pdfium
from PIL import ImageFilter, ImageOps

import docfence
from docfence.core.clock import monotonic
from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import validate as validate_module
from docfence.engines import watermark_document
from docfence.engines.geometry import page_geometry
from docfence.engines.mark_pixels import coverage_mask
from docfence.engines.marks import MarkSet
from docfence.engines.raster import naive_jpeg_size
from docfence.samples import pdfs

SPEC = WatermarkSpec(text="Vertraulich \u2013 Dr. Müller / 患者")


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall seconds, CPU seconds of this process and its waited-for children)."""
    cpu, wall = _cpu(), monotonic()
    result = fn()
    return result, monotonic() - wall, _cpu() - cpu


def one_run(data: bytes, policy: JobPolicy) -> dict[str, Any]:
    spent = {"validate": 0.0}
    real = validate_module.validate

    def timed(*args: Any, **kwargs: Any) -> Any:
        result, _, cpu = measure(lambda: real(*args, **kwargs))
        spent["validate"] += cpu
        return result

    validate_module.validate = timed  # watermark_document() imports it from the module at call time
    try:
        result, wall, cpu = measure(lambda: watermark_document(data, policy))
    finally:
        validate_module.validate = real
    pages = result.pages
    assert result.validation["ok"], result.validation
    return {
        "pages_per_s": round(pages / wall, 1),
        "cpu_ms_per_page": round(cpu * 1000 / pages, 1),
        "validate_cpu_ms_per_page": round(spent["validate"] * 1000 / pages, 1),
        "engine_cpu_ms_per_page": round((cpu - spent["validate"]) * 1000 / pages, 1),
        "output_bytes": len(result.output),
    }


def size_ratio(data: bytes, output_bytes: int, dpi: int) -> float:
    doc = pdfium.PdfDocument(data)
    naive = sum(naive_jpeg_size(doc[i].render(scale=dpi / 72).to_pil()) for i in range(len(doc)))
    return round(naive / output_bytes, 2)


def _judge() -> ModuleType:
    """This checkout's colour_difference.py, loaded by path (the tree under test may not have it)."""
    path = os.path.join(os.path.dirname(_HERE), "docfence", "engines", "colour_difference.py")
    spec = importlib.util.spec_from_file_location("bench_colour_judge", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def colours(data: bytes, output: bytes, policy: JobPolicy) -> dict[str, Any]:
    """Per page: ΔE2000 at the 99th percentile outside the marks and how the page image is encoded."""
    judge = _judge()
    src = pdfium.PdfDocument(data)
    src.init_forms()
    marks = MarkSet.of(policy)
    step = -(-policy.dpi // 150)
    figures, kinds = [], []
    with pikepdf.open(io.BytesIO(data)) as inp, pikepdf.open(io.BytesIO(output)) as out:
        count = len(out.pages)
        for index, page in enumerate(out.pages):
            image = page.Resources.XObject.DfIm
            assert isinstance(image, pikepdf.Stream)
            shown = pikepdf.PdfImage(image).as_pil_image().convert("RGB")
            before = src[index].render(scale=policy.dpi / 72, may_draw_forms=True, draw_annots=True).to_pil()
            before = before.convert("RGB").crop((0, 0, *shown.size))
            drawn = marks.on_page(index, count)
            keep = None
            if drawn:
                near = coverage_mask(page_geometry(inp.pages[index].obj), drawn, shown.size)
                keep = ImageOps.invert(near.point(lambda v: 255 if v else 0).filter(ImageFilter.MaxFilter(9)))
            if step > 1:
                before, shown = before.reduce(step), shown.reduce(step)
                keep = keep.reduce(step).point(lambda v: 255 if v == 255 else 0) if keep else None
            figures.append(round(judge.percentile_difference(before, shown, keep), 2))
            space = image.ColorSpace
            name = str(space[0] if isinstance(space, pikepdf.Array) else space)
            kinds.append(f"{name}/{int(image.BitsPerComponent)}/{image.Filter!s}")
    return {"bound": judge.COLOUR_BOUND_DE99, "de2000_p99_outside_marks": figures,
            "worst_de2000_p99": max(figures), "encodings": kinds}


def black_text_page() -> bytes:
    """One A4 page of black Helvetica text (the case where a red mark once took the palette's black)."""
    return pdfs.many_pages(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pdf", type=Path, nargs="?", help="default with --colours: a black text page")
    parser.add_argument("--dpi", type=int, default=150)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size", action="store_true", help="also the size ratio against RGB JPEG q85")
    parser.add_argument("--colours", action="store_true", help="also ΔE2000 p99 outside the marks, per page")
    args = parser.parse_args()
    if args.pdf is None and not args.colours:
        parser.error("a PDF is needed (only --colours has a default page)")
    data = args.pdf.read_bytes() if args.pdf else black_text_page()
    policy = JobPolicy(mode=Mode.RASTER, dpi=args.dpi, watermark=SPEC)
    watermark_document(data, policy)  # warm: fonts parsed, caches filled, as in the sandbox's zygote
    runs = [one_run(data, policy) for _ in range(args.runs)]
    best = max(runs, key=lambda r: r["pages_per_s"])
    commit = subprocess.run(["git", "-C", os.path.dirname(docfence.__file__), "rev-parse", "--short",
                             "HEAD"], capture_output=True, text=True).stdout.strip()
    out: dict[str, Any] = {
        "code": os.path.dirname(os.path.dirname(docfence.__file__)),
        "commit": commit,
        "document": str(args.pdf or "generated: one page of black text"),
        "dpi": args.dpi,
        "load_average": os.getloadavg(),
        "runs": runs,
        "best_pages_per_s": best["pages_per_s"],
        "min_cpu_ms_per_page": min(r["cpu_ms_per_page"] for r in runs),
    }
    if args.size or args.colours:
        out["smaller_than_rgb_jpeg_q85"] = size_ratio(data, runs[0]["output_bytes"], args.dpi)
    if args.colours:
        out.update(colours(data, watermark_document(data, policy).output, policy))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
