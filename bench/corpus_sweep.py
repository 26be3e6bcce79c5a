"""Corpus sweep: every PDF of a shared corpus through `docfence watermark --json` (one CLI run per file,
default class), each answer judged by docfence.testing.corpus_judge: a refusal of a file that qpdf, pdfinfo
and mutool all read is a false refusal, an output that a reader of the input cannot read (or with another
page count) is wrong; and the breadth rule of issue 29 part 5 (normal: validated, odd: validated or a
policy's coded refusal, bad: a coded refusal; each answer within 20 s and 300 MB).

The readers' verdict on an input comes from the corpus manifest's `category` when it has one from the three
readers (corpus-wide), else it is measured here (qpdf --check exit 0 or 3, pdfinfo exit 0, mutool draw
exit 0). Prints one JSON document per corpus: totals, counts per manifest category and outcome, the
slowest answer and the largest peak, and per file {name, category, readers, outcome (valid | refused |
wrong), code, checks, seconds (the render), wall_s (the CLI run), peak_mb, breaks}.

Usage: python bench/corpus_sweep.py [--mode vector|raster] [--jobs N] [--only SUBSTRING] [--brief]
       DIR [DIR ...]          (--brief: the files that keep the rule are counted but not listed)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from docfence.testing.corpus_judge import assess, categories, corpus_files, manifest


def sweep(folder: Path, mode: str, jobs: int, only: str | None) -> dict[str, Any]:
    files = [p for p in corpus_files(folder) if not only or only in p.name]
    kinds, by_readers = categories(folder), manifest(folder)

    def one(path: Path) -> dict[str, Any]:
        return assess(path, mode, kinds.get(path.name, ""), by_readers.get(path.name, ""))

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        rows = list(pool.map(one, files))
    totals = {k: sum(r["outcome"] == k for r in rows) for k in ("valid", "refused", "wrong")}
    per_category = Counter(f"{r['category']}/{r['outcome']}" for r in rows)
    return {"corpus": str(folder), "mode": mode, "files": len(rows), **totals,
            "per_category": dict(sorted(per_category.items())),
            "codes": dict(sorted(Counter(r["code"] for r in rows).items())),
            "breaking_rule": sum(r["breaks"] is not None for r in rows),
            "slowest_s": max((r["seconds"] or 0 for r in rows), default=0),
            "slowest_wall_s": max((r["wall_s"] for r in rows), default=0),
            "largest_peak_mb": max((r["peak_mb"] for r in rows), default=0),
            "load_after": os.getloadavg()[0], "results": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--mode", choices=["vector", "raster"], default="vector")
    parser.add_argument("--jobs", type=int, default=1, help="CLI runs at once")
    parser.add_argument("--only", help="only files whose name contains this")
    parser.add_argument("--brief", action="store_true", help="list only the files that break the rule")
    args = parser.parse_args()
    report = [sweep(folder, args.mode, args.jobs, args.only) for folder in args.folders]
    if args.brief:
        for corpus in report:
            corpus["results"] = [r for r in corpus["results"] if r["breaks"] or r["outcome"] != "valid"]
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
