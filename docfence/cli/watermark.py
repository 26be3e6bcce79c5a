"""`docfence watermark INPUT... --out DIR`: watermark local files through the engines, each in a child
process with a time limit; outputs are written atomically in DIR, inputs are never modified."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from docfence.core.clock import monotonic
from docfence.core.errors import ConfigError
from docfence.core.policy import POSITIONS, JobPolicy, Mode, WatermarkSpec
from docfence.engines.isolated import run_isolated


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
    p.add_argument("--password-file", type=Path, help="file whose first line is the PDF password")
    p.add_argument("--owner-password-policy", choices=["refuse", "keep"], default="refuse")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run)


def build_policy(args: argparse.Namespace) -> JobPolicy:
    spec = WatermarkSpec(text=args.text, position=args.position, pages=args.pages, opacity=args.opacity)
    return JobPolicy(
        mode=Mode(args.mode), dpi=args.dpi, watermark=spec, owner_password_policy=args.owner_password_policy
    )


def write_atomic(folder: Path, name: str, data: bytes) -> Path:
    """temp file in `folder` + fsync + rename: readers see the whole file or nothing."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        final = folder / name
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final


def process_one(path: Path, out_dir: Path, policy: JobPolicy, password: str | None) -> dict[str, Any]:
    started = monotonic()
    entry: dict[str, Any] = {"input": str(path)}
    try:
        data = path.read_bytes()
    except OSError:
        return {**entry, "ok": False, "code": "input_unreadable", "message": "The input cannot be read."}
    answer = run_isolated(data, policy, password)
    entry["seconds"] = round(monotonic() - started, 3)
    if not answer.ok:
        return {**entry, "ok": False, "code": answer.code, "message": answer.message}
    target = out_dir / f"{path.stem}.watermarked.pdf"
    if target.resolve() == path.resolve():
        return {
            **entry,
            "ok": False,
            "code": "output_would_overwrite_input",
            "message": "Refusing to overwrite.",
        }
    final = write_atomic(out_dir, target.name, answer.output)
    return {**entry, "ok": True, "output": str(final), "pages": answer.pages}


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
    results = []
    total = len(args.inputs)
    for number, path in enumerate(args.inputs, start=1):
        print(f"[{number}/{total}] {path.name} ...", end="", file=sys.stderr, flush=True)
        entry = process_one(path, args.out, policy, password)
        status = f"ok, {entry['pages']} pages" if entry["ok"] else f"FAILED {entry['code']}"
        print(f" {status} ({entry.get('seconds', 0)} s)", file=sys.stderr, flush=True)
        results.append(entry)
    failed = [r for r in results if not r["ok"]]
    print(f"{total - len(failed)} succeeded, {len(failed)} failed", file=sys.stderr)
    for entry in failed:
        print(f"  {entry['input']}: {entry['code']}: {entry['message']}", file=sys.stderr)
    if args.json:
        print(
            json.dumps({"succeeded": total - len(failed), "failed": len(failed), "files": results}, indent=2)
        )
    return 1 if failed else 0
