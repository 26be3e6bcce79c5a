"""`docfence watermark INPUT... --out DIR`: watermark local files through the engines, each in its own
render process of the sandbox (a pool as wide as the cores), progress on stderr; outputs are written
atomically in DIR under names that never collide, inputs are never modified."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from docfence.config import load_limits
from docfence.core.clock import monotonic, utcnow
from docfence.core.errors import ConfigError
from docfence.core.fields import CALLER_FIELDS
from docfence.core.marks import MarkRules, blank_marks, image_uri, resolve_fields
from docfence.core.policy import MAX_MARKS, POSITIONS, JobPolicy, Mode, WatermarkSpec
from docfence.engines.checks import explain
from docfence.sandbox import Sandbox, Task


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("watermark", help="watermark PDF files (vector or raster)")
    p.add_argument("inputs", nargs="+", metavar="INPUT", type=Path)
    p.add_argument(
        "--out", required=True, type=Path, metavar="DIR", help="output folder (created if missing)"
    )
    p.add_argument("--text", default="CONFIDENTIAL")
    p.add_argument("--mode", choices=[m.value for m in Mode], default="vector")
    p.add_argument("--dpi", type=int, default=150, help="raster mode resolution")
    p.add_argument("--pages", default="all", help="all, first, last, odd, even or ranges like 1-3,7")
    p.add_argument("--opacity", type=float, default=0.25)
    p.add_argument("--position", choices=POSITIONS, default="diagonal")
    p.add_argument("--mark", action="append", default=[], metavar="JSON",
                   help='a further mark (repeatable), e.g. \'{"text": "{recipient} {page}/{pages}", '
                        '"position": "footer"}\'; "image" names a .png or .svg file')
    p.add_argument("--recipient", help="fills {recipient} in mark text (at most 120 characters)")
    p.add_argument("--purpose", help="fills {purpose} (at most 120 characters)")
    p.add_argument("--reference", help="fills {reference} (at most 64 characters)")
    p.add_argument("--timezone", default="UTC", help="time zone of {date} and {datetime} (default UTC)")
    p.add_argument("--password-file", type=Path, help="file whose first line is the PDF password")
    p.add_argument("--owner-password-policy", choices=["keep", "refuse"], default="keep",
                   help="a file with an owner password only: keep its encryption and permissions as "
                        "they were (default), or refuse it")
    p.add_argument("--obscure", choices=["refuse", "reduce", "allow"], default="reduce",
                   help="a mark opaque enough to hide the page's text, with no free space for it: refuse "
                        "the file, reduce the mark to a legible opacity (default), or allow it")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.add_argument("--jobs", type=int, default=0, help="files processed at once (default: the cores)")
    p.set_defaults(func=run)


def build_policy(args: argparse.Namespace) -> JobPolicy:
    """The job policy from the options; the resource limits are the configuration file's `[limits]`
    (DOCFENCE_CONFIG), the defaults when none is set (no other setting is read: no database here)."""
    spec = WatermarkSpec.from_mapping(
        {"text": args.text, "position": args.position, "pages": args.pages, "opacity": args.opacity})
    rules = MarkRules(max_marks=MAX_MARKS, timezone=getattr(args, "timezone", "UTC"))
    caller = {name: getattr(args, name) for name in CALLER_FIELDS if getattr(args, name, None) is not None}
    fields = resolve_fields(rules, caller, job_id="local", tenant="local", issued_at=utcnow())
    marks = tuple(_mark(raw) for raw in getattr(args, "mark", None) or ())
    blank = blank_marks((spec, *marks), fields)
    if blank:
        raise ConfigError(f"mark {blank[0]} draws nothing once its fields are filled (missing --recipient?)")
    return JobPolicy(
        mode=Mode(args.mode), dpi=args.dpi, watermark=spec, owner_password_policy=args.owner_password_policy,
        obscure=getattr(args, "obscure", "reduce"), limits=load_limits(), marks=marks, fields=fields,
    )


def _mark(raw: str) -> WatermarkSpec:
    """One --mark option: a JSON object of mark fields ("image": a .png or .svg file's path)."""
    try:
        given = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"--mark must be a JSON object of mark fields ({exc})") from None
    if not isinstance(given, dict):
        raise ConfigError("--mark must be a JSON object of mark fields")
    if isinstance(given.get("image"), str):
        given["image"] = image_uri(given["image"])
    if isinstance(given.get("color"), list):
        given["color"] = tuple(given["color"])
    return WatermarkSpec.from_mapping(given)


def for_file(policy: JobPolicy, data: bytes) -> JobPolicy:
    """The policy with `{sha8}` of this input filled."""
    if policy.fields is None:
        return policy
    return policy.evolve(fields={**policy.fields, "sha8": hashlib.sha256(data).hexdigest()[:8]})


def output_names(inputs: list[Path]) -> list[str]:
    """One output name per input, never two alike: `NAME.watermarked.pdf`, or, when inputs from
    different folders share a name, the folders that tell them apart (`a__report.watermarked.pdf`),
    and a number as the last resort (the same file given twice)."""
    def name(path: Path, depth: int) -> str:
        parts = [*path.resolve().parent.parts[1:]][-depth:] if depth else []
        return "__".join([*parts, path.stem]) + ".watermarked.pdf"

    names = [name(p, 0) for p in inputs]
    resolved = [p.resolve() for p in inputs]
    for depth in range(1, 64):
        owners: dict[str, set[Path]] = {}
        for n, path in zip(names, resolved, strict=True):
            owners.setdefault(n, set()).add(path)
        clashing = {n for n, paths in owners.items() if len(paths) > 1}  # the same file twice: numbered
        if not clashing:
            break
        names = [name(p, depth) if n in clashing else n for p, n in zip(inputs, names, strict=True)]
    taken: set[str] = set()
    for index, candidate in enumerate(names):
        unique, number = candidate, 2
        while unique in taken:
            unique = candidate.replace(".watermarked.pdf", f"-{number}.watermarked.pdf")
            number += 1
        taken.add(unique)
        names[index] = unique
    return names


def _publish(tmp: Path, final: Path) -> Path:
    """The render process wrote and fsynced `tmp` in the output folder; rename it into place."""
    os.replace(tmp, final)
    dir_fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final


def process_one(sandbox: Sandbox, path: Path, out_dir: Path, name: str, policy: JobPolicy,
                password: str | None) -> dict[str, Any]:
    started = monotonic()
    entry: dict[str, Any] = {"input": str(path)}
    target = out_dir / name
    try:
        policy = for_file(policy, path.read_bytes())
    except OSError:
        return {**entry, "ok": False, "code": "input_unreadable", "message": "The input cannot be read."}
    if target.resolve() == path.resolve():
        return {**entry, "ok": False, "code": "output_would_overwrite_input",
                "message": "Refusing to overwrite."}
    fd, tmp_name = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        answer = sandbox.run(Task("watermark", path, tmp, policy, password=password, fsync=True))
        entry["seconds"] = round(monotonic() - started, 3)
        if not answer.ok:
            return {**entry, "ok": False, "code": answer.error_code, "message": answer.error_message,
                    **_failed_checks(answer.validation)}
        final = _publish(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return {**entry, "ok": True, "output": str(final), "pages": answer.pages}


def _failed_checks(report: dict[str, Any] | None) -> dict[str, Any]:
    """A refused file's failed checks with what each found ({"checks": [{"name", "details"}]}); the
    details name pages, PDF names, numbers and reader messages, never the document's text."""
    if not report:
        return {}
    return {"checks": [{"name": name, "details": details} for name, details in explain(report)]}


def _read_password(path: Path | None) -> str | None:
    if path is None:
        return None
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[0] if lines else ""


def run(args: argparse.Namespace) -> int:
    try:
        policy = build_policy(args)
        password = _read_password(args.password_file)
    except (ConfigError, OSError) as exc:
        print(
            f"docfence watermark: {getattr(exc, 'message', 'cannot read the password file')}", file=sys.stderr
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    inputs: list[Path] = list(args.inputs)
    names = output_names(inputs)
    _report_renames(inputs, names)
    results = _run_pool(inputs, names, args.out, policy, password, args.jobs or os.cpu_count() or 1,
                        getattr(args, "sandbox", None))
    total = len(results)
    failed = [r for r in results if not r["ok"]]
    print(f"{total - len(failed)} succeeded, {len(failed)} failed", file=sys.stderr)
    for entry in failed:
        print(f"  {entry['input']}: {entry['code']}: {entry['message']}", file=sys.stderr)
        for found in entry.get("checks", []):  # what the message (which names the first) leaves out
            for detail in found["details"]:
                if detail not in (entry["message"] or ""):
                    print(f"    {found['name']}: {detail}", file=sys.stderr)
    if args.json:
        print(
            json.dumps({"succeeded": total - len(failed), "failed": len(failed), "files": results}, indent=2)
        )
    return 1 if failed else 0


def _report_renames(inputs: list[Path], names: list[str]) -> None:
    for path, name in zip(inputs, names, strict=True):
        if name != f"{path.stem}.watermarked.pdf":
            print(f"note: {path} shares its name with another input; written as {name}", file=sys.stderr)


def _run_pool(inputs: list[Path], names: list[str], out_dir: Path, policy: JobPolicy,
              password: str | None, width: int, started: Sandbox | None = None) -> list[dict[str, Any]]:
    """Results in input order; progress lines on stderr as files finish. `started`: a "watermark"
    sandbox whose zygote is already warming up (the command line starts it early), else a new one."""
    total, done = len(inputs), 0
    results: list[dict[str, Any]] = [{} for _ in inputs]
    # watermark tasks only: no report engine (weasyprint) imported in the zygote while the jobs run
    sandbox_cm = started if started is not None else Sandbox("watermark")
    with sandbox_cm as sandbox, ThreadPoolExecutor(max_workers=max(1, min(width, total))) as pool:
        sandbox.start()  # from this thread, which outlives the pool (the zygote dies with its starter)
        futures = {pool.submit(process_one, sandbox, path, out_dir, name, policy, password): index
                   for index, (path, name) in enumerate(zip(inputs, names, strict=True))}
        for future in as_completed(futures):
            entry = future.result()
            results[futures[future]] = entry
            done += 1
            status = f"ok, {entry['pages']} pages" if entry["ok"] else f"FAILED {entry['code']}"
            print(f"[{done}/{total}] {Path(entry['input']).name}: {status} ({entry.get('seconds', 0)} s)",
                  file=sys.stderr, flush=True)
    return results
