"""Raster engine benchmark: `engines.watermark_document()` (render, encode, validate) in raster mode at
a DPI on one dense document, run in this process: pages/s (wall) and CPU ms per page (getrusage SELF +
CHILDREN, so the forked page ranges, validation pieces and pdfinfo are counted), with the engine's and
the validator's share; and the output size against RGB JPEG q85 of the same renders (the size target:
>= 2x smaller).

Run it once per tree, alternating, to compare code on a loaded machine:
    PYTHONPATH=/work/main python bench/raster.py /tmp/dense/corpus/doc_200p.pdf --runs 3
Prints one JSON object.
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # bench/queue.py shadows queue

import argparse
import json
import resource
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pypdfium2 as pdfium

import docfence
from docfence.core.clock import monotonic
from docfence.core.policy import JobPolicy, Mode, WatermarkSpec
from docfence.engines import validate as validate_module
from docfence.engines import watermark_document
from docfence.engines.raster import naive_jpeg_size

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pdf", type=Path)
    parser.add_argument("--dpi", type=int, default=150)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size", action="store_true", help="also the size ratio against RGB JPEG q85")
    args = parser.parse_args()
    data = args.pdf.read_bytes()
    policy = JobPolicy(mode=Mode.RASTER, dpi=args.dpi, watermark=SPEC)
    watermark_document(data, policy)  # warm: fonts parsed, caches filled, as in the sandbox's zygote
    runs = [one_run(data, policy) for _ in range(args.runs)]
    best = max(runs, key=lambda r: r["pages_per_s"])
    commit = subprocess.run(["git", "-C", os.path.dirname(docfence.__file__), "rev-parse", "--short",
                             "HEAD"], capture_output=True, text=True).stdout.strip()
    out: dict[str, Any] = {
        "code": os.path.dirname(os.path.dirname(docfence.__file__)),
        "commit": commit,
        "document": str(args.pdf),
        "dpi": args.dpi,
        "load_average": os.getloadavg(),
        "runs": runs,
        "best_pages_per_s": best["pages_per_s"],
        "min_cpu_ms_per_page": min(r["cpu_ms_per_page"] for r in runs),
    }
    if args.size:
        out["smaller_than_rgb_jpeg_q85"] = size_ratio(data, runs[0]["output_bytes"], args.dpi)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
