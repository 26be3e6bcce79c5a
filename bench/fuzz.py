"""Fuzz `docfence watermark` with deterministic mutations of seed PDFs and print the figures as JSON.

    python bench/fuzz.py --seeds ../shared/corpus --n 2000 --seed 1 --json [--modes vector,raster]
        [--raster-every K] [--batch B] [--keep DIR]

Input i is mutation `MUTATIONS[rng]` of seed `rng` with `rng = Random(f"{seed}:{i}")`, so a run is
reproducible and input i can be regenerated alone (`--only i --keep DIR`). Every input goes through the
real CLI (`docfence watermark --json`, BATCH inputs per invocation through its warm sandbox pool, each
file in its own render process under the default limits) in vector mode, and every K-th one also in
raster mode; per-file outcomes and times come from the CLI's JSON report. Figures: inputs, runs,
answers by code, tracebacks (a crashed child or CLI, or an uncoded engine exception:
engine_error/render_crashed; goal 0), answers over budget (later than limits.render_timeout_s plus the
kill grace; goal 0), inputs the sandbox stopped at their time budget (render_resource_exceeded, listed
apart), outputs that `qpdf --check` or `mutool` reject (goal 0), p50/p99 time to refusal (goal p99 <=
2 s), peak RSS, wall time (total, in the CLI, sum of the per-file times).
mutool (AGPL) is only an outside checker here, never a runtime dependency.
"""

from __future__ import annotations

import argparse
import binascii
import io
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pikepdf

from docfence.core.interpreter import module_command
from docfence.core.policy import Limits

REFUSAL_P99_GOAL_S = 2.0


def _region(data: bytes, rng: random.Random, pattern: bytes) -> tuple[int, int]:
    spans = [(m.start(), m.end()) for m in re.finditer(pattern, data, re.S)]
    return rng.choice(spans) if spans else (0, len(data))


def _flip(data: bytes, rng: random.Random, start: int, end: int, flips: int = 4) -> bytes:
    buf = bytearray(data)
    for _ in range(flips):
        if end > start:
            pos = rng.randrange(start, end)
            buf[pos] ^= 1 << rng.randrange(8)
    return bytes(buf)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(max(1, len(data) // 10), len(data))]


def flip_xref(data: bytes, rng: random.Random) -> bytes:
    start = max(data.rfind(b"xref"), data.rfind(b"startxref") - 200, 0)
    return _flip(data, rng, start, len(data))


def flip_trailer(data: bytes, rng: random.Random) -> bytes:
    return _flip(data, rng, *_region(data, rng, rb"trailer\s*<<.*?>>"))


def flip_stream(data: bytes, rng: random.Random) -> bytes:
    return _flip(data, rng, *_region(data, rng, rb"stream\r?\n.*?endstream"), flips=8)


def flip_dict(data: bytes, rng: random.Random) -> bytes:
    return _flip(data, rng, *_region(data, rng, rb"<<[^<>]{4,400}>>"))


def duplicate_object(data: bytes, rng: random.Random) -> bytes:
    start, end = _region(data, rng, rb"\d+ 0 obj.*?endobj")
    return data[:end] + b"\n" + data[start:end] + data[end:]


def dangling_ref(data: bytes, rng: random.Random) -> bytes:
    refs = list(re.finditer(rb"\b\d+ 0 R\b", data))
    if not refs:
        return truncate(data, rng)
    m = rng.choice(refs)
    return data[: m.start()] + b"%d 0 R" % rng.randrange(90000, 99999) + data[m.end() :]


def _edited(data: bytes, rng: random.Random, edit: Callable[[pikepdf.Pdf, random.Random], None]) -> bytes:
    """A structural mutation through pikepdf; byte flips when the seed file does not open."""
    try:
        pdf = pikepdf.open(io.BytesIO(data))
        edit(pdf, rng)
        out = io.BytesIO()
        pdf.save(out, compress_streams=False, deterministic_id=True)
        return out.getvalue()
    except Exception:
        return flip_dict(data, rng)


def _bomb(pdf: pikepdf.Pdf, rng: random.Random) -> None:
    inner = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = inner.compress(b"\0" * (1 << 20)) + inner.flush(zlib.Z_FULL_FLUSH)
    body = b"\x78\xda" + segment * 1024 + zlib.compressobj(9, zlib.DEFLATED, -15).flush() + b"\0\0\0\1"
    stream = pdf.make_stream(b"")
    stream.write(binascii.hexlify(zlib.compress(body, 9)) + b">", filter=pikepdf.Array(
        [pikepdf.Name.ASCIIHexDecode, pikepdf.Name.FlateDecode, pikepdf.Name.FlateDecode]))
    stream.Type, stream.Subtype, stream.BBox = pikepdf.Name.XObject, pikepdf.Name.Form, [0, 0, 1, 1]
    if rng.random() < 0.5:
        pdf.Root.Hidden = stream
    else:
        page = pdf.pages[0].obj
        page.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Bomb=stream))
        pdf.pages[0].contents_add(pdf.make_stream(b"/Bomb Do"))


def _huge_count(pdf: pikepdf.Pdf, rng: random.Random) -> None:
    pdf.Root.Pages.Count = rng.choice([2**31 - 1, 10**12, -1])


def _deep_nesting(pdf: pikepdf.Pdf, rng: random.Random) -> None:
    node: pikepdf.Object = pikepdf.Array([1])
    for _ in range(rng.choice([100, 1000])):
        node = pikepdf.Array([node])
    pdf.Root.Deep = node


def _cycle(pdf: pikepdf.Pdf, rng: random.Random) -> None:
    choice = rng.randrange(3)
    page = pdf.pages[0].obj
    if choice == 0:  # a form that draws itself
        form = pdf.make_stream(b"/Me Do")
        form.Type, form.Subtype, form.BBox = pikepdf.Name.XObject, pikepdf.Name.Form, [0, 0, 1, 1]
        form.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Me=form))
        page.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Me=form))
        pdf.pages[0].contents_add(pdf.make_stream(b"/Me Do"))
    elif choice == 1:  # one widget under a named and an unnamed field: pdfium never loads the page
        named = pdf.make_indirect(pikepdf.Dictionary(T=pikepdf.String("a")))
        widget = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Widget,
                                                      FT=pikepdf.Name.Tx, Rect=[0, 0, 10, 10], P=page,
                                                      Parent=named))
        unnamed = pdf.make_indirect(pikepdf.Dictionary(Kids=[widget], Parent=named))
        named.Kids = pikepdf.Array([widget])
        pdf.Root.AcroForm = pikepdf.Dictionary(Fields=pikepdf.Array([named, unnamed]))
        page.Annots = pikepdf.Array([widget])
    else:  # outline items that loop
        first = pdf.make_indirect(pikepdf.Dictionary(Title=pikepdf.String("a")))
        second = pdf.make_indirect(pikepdf.Dictionary(Title=pikepdf.String("b"), Next=first))
        first.Next = second
        pdf.Root.Outlines = pikepdf.Dictionary(First=first, Last=second, Count=2)


def _broken_font_or_image(pdf: pikepdf.Pdf, rng: random.Random) -> None:
    targets = [o for o in pdf.objects if isinstance(o, pikepdf.Stream)
               and (o.get("/Subtype") == pikepdf.Name.Image or any(k in o for k in ("/Length1", "/Length3")))]
    if not targets:
        targets = [o for o in pdf.objects if isinstance(o, pikepdf.Stream)]
    target = rng.choice(targets)
    raw = bytearray(target.read_raw_bytes())
    for _ in range(16):
        if raw:
            raw[rng.randrange(len(raw))] = rng.randrange(256)
    target.write(bytes(raw), filter=target.get("/Filter"), decode_parms=target.get("/DecodeParms"))
    if target.get("/Subtype") == pikepdf.Name.Image and rng.random() < 0.5:
        target.Width = rng.choice([0, 2**20, -5])


MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "truncate": truncate,
    "flip_xref": flip_xref,
    "flip_trailer": flip_trailer,
    "flip_stream": flip_stream,
    "flip_dict": flip_dict,
    "duplicate_object": duplicate_object,
    "dangling_ref": dangling_ref,
    "bomb": lambda d, r: _edited(d, r, _bomb),
    "huge_count": lambda d, r: _edited(d, r, _huge_count),
    "deep_nesting": lambda d, r: _edited(d, r, _deep_nesting),
    "reference_cycle": lambda d, r: _edited(d, r, _cycle),
    "broken_font_or_image": lambda d, r: _edited(d, r, _broken_font_or_image),
}


def seed_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix == ".pdf" and p.stat().st_size < 2_000_000)


def make_input(seeds: list[Path], seed: int, index: int) -> tuple[str, str, bytes]:
    rng = random.Random(f"{seed}:{index}")
    source = rng.choice(seeds)
    name = rng.choice(sorted(MUTATIONS))
    return source.name, name, MUTATIONS[name](source.read_bytes(), rng)


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("docfence")
    return [str(exe)] if exe.exists() else module_command("docfence.cli")


def _child_env() -> dict[str, str]:
    """The CLI's environment without DOCFENCE_CONFIG: the fuzz run measures the default limits."""
    return {k: v for k, v in os.environ.items() if k != "DOCFENCE_CONFIG"}


def run_cli(
    paths: list[Path], mode: str, out_dir: Path, budget_s: float
) -> tuple[list[dict[str, Any]], int, str]:
    """One `docfence watermark --json` over `paths` (the CLI's warm sandbox pool, distinct output names);
    (per-file entries in input order, peak RSS of any process it ran so far in KiB, CLI stderr).

    Each entry is the CLI's own per-file report: outcome, code and `seconds`, the time of that file's
    sandboxed run alone (not the queue before it). When the CLI itself crashes, hangs or prints a
    traceback, the batch tells nothing exact per file, so every file of it is run again alone and only
    the files whose own CLI run crashes are counted as crashed."""
    entries, peak_kib, stderr = _one_cli(paths, mode, out_dir, budget_s)
    if len(paths) > 1 and (entries is None or "Traceback" in stderr):
        singles = [_one_cli([p], mode, out_dir, budget_s) for p in paths]
        files = [e[0] if e is not None else _crashed_entry(p)
                 for p, (e, _, _) in zip(paths, singles, strict=True)]
        return files, max([peak_kib, *(k for _, k, _ in singles)]), "".join(err for _, _, err in singles)
    return (entries if entries is not None else [_crashed_entry(p) for p in paths]), peak_kib, stderr


def _crashed_entry(path: Path) -> dict[str, Any]:
    return {"input": str(path), "ok": False, "code": "cli_crashed", "message": "the CLI gave no JSON report"}


def _one_cli(paths: list[Path], mode: str, out_dir: Path,
             budget_s: float) -> tuple[list[dict[str, Any]] | None, int, str]:
    args = [*_cli(), "watermark", *map(str, paths), "--out", str(out_dir), "--mode", mode, "--json"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env())
    try:
        stdout, stderr = proc.communicate(timeout=budget_s * (len(paths) + 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the largest descendant waited for so far
    try:
        files = json.loads(stdout.decode())["files"]
        if [f["input"] for f in files] != [str(p) for p in paths]:
            files = None
    except (ValueError, KeyError, TypeError):
        files = None
    return files, int(usage.ru_maxrss), stderr.decode("utf-8", "replace")


def output_rejected(path: Path) -> str | None:
    """Which outside checker rejects a produced output (None: both accept it)."""
    qpdf = subprocess.run(["qpdf", "--check", str(path)], capture_output=True, timeout=120, check=False)
    if qpdf.returncode not in (0, 3):  # 3: warnings only
        return "qpdf"
    if shutil.which("mutool"):
        mutool = subprocess.run(["mutool", "info", str(path)], capture_output=True, timeout=120, check=False)
        if mutool.returncode != 0 or b"error" in mutool.stderr.lower():
            return "mutool"
    return None


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fuzz(seeds: Path, n: int, seed: int, modes: list[str], raster_every: int, batch: int,
         keep: Path | None, only: int | None = None) -> dict[str, Any]:
    files = seed_files(seeds)
    budget_s = Limits().render_timeout_s
    work = Path(tempfile.mkdtemp(prefix="docfence-fuzz-"))
    indices = [only] if only is not None else list(range(n))
    meta: dict[str, tuple[int, str, str]] = {}
    for i in indices:
        source, mutation, data = make_input(files, seed, i)
        path = (keep or work) / f"fuzz-{seed}-{i:05d}.pdf"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        meta[str(path)] = (i, source, mutation)
    runs: list[dict[str, Any]] = []
    peak_kib = 0
    stderr_tracebacks = 0
    started, cli_s = time.monotonic(), 0.0
    with ThreadPoolExecutor(max_workers=2) as checkers:  # qpdf/mutool of one batch overlap the next
        for mode in modes:
            chosen = [p for p, (i, _, _) in meta.items() if mode != "raster" or i % raster_every == 0]
            out_dir = (keep or work) / f"out-{mode}"
            out_dir.mkdir(exist_ok=True)
            for start in range(0, len(chosen), batch):
                cli_started = time.monotonic()
                entries, rss, stderr = run_cli([Path(p) for p in chosen[start : start + batch]], mode,
                                               out_dir, budget_s)
                cli_s += time.monotonic() - cli_started
                peak_kib = max(peak_kib, rss)
                stderr_tracebacks += stderr.count("Traceback")
                for entry in entries:
                    i, source, mutation = meta[entry["input"]]
                    run = {"index": i, "seed_file": source, "mutation": mutation, "mode": mode,
                           "code": entry.get("code", "ok") if not entry.get("ok") else "ok",
                           "message": entry.get("message", ""), "seconds": entry.get("seconds", 0.0)}
                    if entry.get("ok"):
                        run["check"] = checkers.submit(output_rejected, Path(entry["output"]))
                    runs.append(run)
        for run in runs:
            if "check" in run:
                run["rejected_by"] = run.pop("check").result()
    shutil.rmtree(work, ignore_errors=True)
    result = summarise(runs, len(indices), peak_kib, stderr_tracebacks, budget_s)
    result["wall_seconds"] = {"total": round(time.monotonic() - started, 1), "cli": round(cli_s, 1),
                              "per_file_sum": round(sum(r["seconds"] for r in runs), 1)}
    return result


CRASH_CODES = frozenset({"cli_crashed", "internal_error", "engine_error", "render_crashed"})


def _crashed(run: dict[str, Any]) -> bool:
    """An uncoded failure: the CLI or the render child crashed, or an engine raised something uncoded."""
    return run["code"] in CRASH_CODES


KILL_GRACE_S = 2.0  # the sandbox kills at the budget, SIGKILLs a second later, then answers


def _over_budget(run: dict[str, Any], budget_s: float) -> bool:
    """An answer later than the largest budget any input may get (limits.render_timeout_s)."""
    return run["seconds"] > budget_s + KILL_GRACE_S


def _time_limit(run: dict[str, Any]) -> bool:
    """Answered in time, but because the sandbox stopped the work at the input's budget."""
    return run["code"] == "render_resource_exceeded" and "time" in run["message"]


def summarise(runs: list[dict[str, Any]], inputs: int, peak_kib: int, stderr_tracebacks: int,
              budget_s: float) -> dict[str, Any]:
    refusals = [r["seconds"] for r in runs if r["code"] != "ok" and not _time_limit(r)]
    failures = [r["seconds"] for r in runs if r["code"] != "ok"]
    crashed = [r for r in runs if _crashed(r)]
    over = [r for r in runs if _over_budget(r, budget_s)]
    killed = [r for r in runs if _time_limit(r)]
    rejected = [r for r in runs if r.get("rejected_by")]
    pick = ("index", "seed_file", "mutation", "mode", "code", "seconds")
    return {
        "inputs": inputs,
        "runs": len(runs),
        "codes": dict(sorted(Counter(r["code"] for r in runs).items())),
        "mutations": dict(sorted(Counter(r["mutation"] for r in runs).items())),
        "tracebacks": len(crashed) + stderr_tracebacks,
        "over_budget": len(over),
        "stopped_at_time_budget": len(killed),
        "outputs_rejected": len(rejected),
        "refusal_seconds_p50": round(_percentile(refusals, 0.50), 3),
        "refusal_seconds_p99": round(_percentile(refusals, 0.99), 3),
        "refusal_p99_goal_s": REFUSAL_P99_GOAL_S,
        "failure_seconds_p99": round(_percentile(failures, 0.99), 3),  # time-budget stops included
        "seconds_max": round(max((r["seconds"] for r in runs), default=0.0), 3),
        "budget_s": budget_s,
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "examples": {
            "tracebacks": [{k: r[k] for k in pick} for r in crashed[:10]],
            "over_budget": [{k: r[k] for k in pick} for r in over[:10]],
            "stopped_at_time_budget": [{k: r[k] for k in pick} for r in killed[:10]],
            "outputs_rejected": [{**{k: r[k] for k in pick}, "by": r["rejected_by"]} for r in rejected[:10]],
            "slowest_refusals": [{k: r[k] for k in pick} for r in sorted(
                (r for r in runs if r["code"] != "ok" and not _time_limit(r)),
                key=lambda r: -r["seconds"])[:5]],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=Path, required=True, help="folder of seed PDFs")
    parser.add_argument("--n", type=int, default=100, help="number of mutated inputs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default="vector,raster")
    parser.add_argument("--raster-every", type=int, default=1, help="raster mode for every K-th input")
    parser.add_argument("--batch", type=int, default=25, help="inputs per docfence watermark call")
    parser.add_argument("--keep", type=Path, help="keep the inputs (and outputs) in this folder")
    parser.add_argument("--only", type=int, help="regenerate and run input number ONLY alone")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (default)")
    args = parser.parse_args(argv)
    result = fuzz(args.seeds, args.n, args.seed, args.modes.split(","), args.raster_every, args.batch,
                  args.keep, args.only)
    result["command"] = "python bench/fuzz.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
