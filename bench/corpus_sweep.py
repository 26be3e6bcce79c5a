"""Corpus sweep: every PDF of a shared corpus through `docfence watermark --json` (one CLI run, default
class), each answer judged: a refusal of a file that qpdf, pdfinfo and mutool all read is a false refusal,
an output that a reader of the input cannot read (or with another page count) is wrong.

The readers' verdict on an input comes from the corpus manifest's `category` when it has one from the three
readers (corpus-wide), else it is measured here (qpdf --check exit 0 or 3, pdfinfo exit 0, mutool draw
exit 0). Prints one JSON document: totals and per file
{name, category, readers, outcome (valid | refused | wrong), code, checks, seconds}.

Usage: python bench/corpus_sweep.py [--mode vector|raster] [--jobs N] [--only SUBSTRING] [--brief]
       DIR [DIR ...]          (--brief: the valid files are counted but not listed)
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DOCFENCE = Path(sys.executable).with_name("docfence")
TIMEOUT_S = 120


def _ok(args: list[str], accept: tuple[int, ...] = (0,)) -> bool:
    try:
        done = subprocess.run(args, capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode in accept


def readers(path: Path) -> list[bool]:
    """qpdf, pdfinfo and mutool on one file: does each read it?"""
    return [
        _ok(["qpdf", "--check", str(path)], (0, 3)),
        _ok(["pdfinfo", str(path)]),
        _ok(["mutool", "draw", "-q", "-r", "20", "-F", "ppm", "-o", "/dev/null", str(path)]),
    ]


def pages(path: Path) -> int | None:
    done = subprocess.run(["pdfinfo", str(path)], capture_output=True, timeout=TIMEOUT_S, check=False)
    for line in done.stdout.decode(errors="replace").splitlines():
        if line.startswith("Pages:"):
            return int(line.split()[1])
    return None


def drawable_pages(path: Path, count: int) -> int:
    """How many of the `count` pages a reader announces mutool can find and draw (a /Count that
    overstates the page tree, or a kid that is not a page, is announced but never drawn)."""
    drawn = 0
    for number in range(1, min(count, 60) + 1):
        done = subprocess.run(["mutool", "draw", "-q", "-r", "10", "-F", "ppm", "-o", "/dev/null", str(path),
                               str(number)], capture_output=True, timeout=TIMEOUT_S, check=False)
        text = done.stderr.decode(errors="replace")
        drawn += "cannot find page" not in text and "non-page object" not in text
    return drawn


def manifest(folder: Path) -> dict[str, str]:
    """name -> category from the three readers, when the folder's manifest carries one from them."""
    table = folder / "manifest.tsv"
    if not table.is_file():
        return {}
    with table.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if not rows or "note" not in rows[0]:  # a hand-written category, not the readers'
        return {}
    return {row["name"]: row["category"] for row in rows}


def watermark(files: list[Path], out: Path, mode: str, jobs: int) -> list[dict[str, Any]]:
    args = [str(DOCFENCE), "watermark", "--out", str(out), "--mode", mode, "--json", "--jobs", str(jobs)]
    done = subprocess.run([*args, *map(str, files)], capture_output=True, check=False)
    entries: list[dict[str, Any]] = json.loads(done.stdout.decode())["files"]
    return entries


def judge(entry: dict[str, Any], category: str, read: list[bool]) -> dict[str, Any]:
    source = Path(entry["input"])
    row: dict[str, Any] = {"name": source.name, "category": category, "readers": read,
                           "seconds": entry.get("seconds")}
    if not entry["ok"]:
        checks = [c["name"] for c in entry.get("checks", [])]
        row.update(code=entry["code"], checks=checks, message=entry.get("message"))
        row["outcome"] = "wrong" if all(read) else "refused"
        return row
    output = Path(entry["output"])
    out_read, here = readers(output), readers(source)  # judged against what reads the input on this machine
    row["code"] = "ok"
    same_pages = True
    if here[1] and (announced := pages(source)) != (made := pages(output)):
        same_pages = made == drawable_pages(source, announced or 0)
    lost = any(before and not after for before, after in zip(here, out_read, strict=True))
    row["outcome"] = "wrong" if lost or not same_pages else "valid"
    if row["outcome"] == "wrong":
        row["output_readers"], row["same_pages"] = out_read, same_pages
    return row


def sweep(folder: Path, mode: str, jobs: int, only: str | None) -> dict[str, Any]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name not in ("README.md", "manifest.tsv"))
    if only:
        files = [p for p in files if only in p.name]
    categories = manifest(folder)
    with tempfile.TemporaryDirectory(prefix="corpus-sweep-") as out:
        rows = []
        for entry in watermark(files, Path(out), mode, jobs):
            name = Path(entry["input"]).name
            category = categories.get(name, "")
            # the manifest's verdict stands for the input; measured when it has none (or for an odd one)
            read = {"normal": [True] * 3, "bad": [False] * 3}.get(category) or readers(Path(entry["input"]))
            category = category or {3: "normal", 0: "bad"}.get(sum(read), "odd")
            rows.append(judge(entry, category, read))
    totals = {k: sum(r["outcome"] == k for r in rows) for k in ("valid", "refused", "wrong")}
    return {"corpus": str(folder), "mode": mode, "files": len(rows), **totals,
            "slowest_s": max((r["seconds"] or 0 for r in rows), default=0), "results": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--mode", choices=["vector", "raster"], default="vector")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--only", help="only files whose name contains this")
    parser.add_argument("--brief", action="store_true", help="list only the files not validated")
    args = parser.parse_args()
    report = [sweep(folder, args.mode, args.jobs, args.only) for folder in args.folders]
    if args.brief:
        for corpus in report:
            corpus["results"] = [r for r in corpus["results"] if r["outcome"] != "valid"]
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
