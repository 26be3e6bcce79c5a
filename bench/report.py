"""Benchmark of the report renderer: median render time per page for the shipped 1-page and ~20-page
sample reports. `python bench/report.py --json` prints one JSON object."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from typing import Any

from docfence.core.clock import monotonic
from docfence.engines.report.render import render_report
from docfence.samples.monthly_report import load_monthly_bundle, sample_monthly_data


def measure(pages: int, repetitions: int) -> dict[str, Any]:
    """Render the sample sized for `pages` pages `repetitions` times (after one warm-up render)."""
    bundle = load_monthly_bundle()
    data = sample_monthly_data(pages=pages)
    report = render_report(bundle, data)  # warm-up: font configuration, imports, caches
    timings: list[float] = []
    for _ in range(repetitions):
        started = monotonic()
        report = render_report(bundle, data)
        timings.append(monotonic() - started)
    median = statistics.median(timings)
    return {
        "pages": report.pages,
        "pdf_bytes": len(report.pdf),
        "repetitions": repetitions,
        "median_seconds": round(median, 4),
        "min_seconds": round(min(timings), 4),
        "median_ms_per_page": round(1000 * median / report.pages, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "benchmark": "report_render",
        "python": platform.python_version(),
        "one_page": measure(1, args.repetitions),
        "twenty_pages": measure(20, max(1, args.repetitions // 2 + 1)),
    }
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for name in ("one_page", "twenty_pages"):
            r = result[name]
            print(
                f"{name:>12}: {r['pages']:>3} pages, median {r['median_seconds']:.3f} s, "
                f"{r['median_ms_per_page']:.1f} ms/page ({r['repetitions']} runs)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
