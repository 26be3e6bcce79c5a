"""`docfence watermark`: atomic outputs in DIR, inputs untouched, a summary, exit 1 when any file failed."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pytest

from docfence.cli import watermark
from docfence.engines import samples


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="docfence")
    watermark.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["watermark", *argv])
    code: int = args.func(args)
    return code


def test_cli_mixed_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "in" / "links.pdf"
    bad = tmp_path / "in" / "notes.pdf"
    good.parent.mkdir()
    good.write_bytes(samples.links())
    bad.write_bytes(b"not a pdf at all")
    before = hashlib.sha256(good.read_bytes()).hexdigest()
    out = tmp_path / "out"
    code = _run([str(good), str(bad), "--out", str(out), "--text", "Vertraulich", "--pages", "1", "--json"])
    assert code == 1
    assert hashlib.sha256(good.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in out.iterdir()) == ["links.watermarked.pdf"]  # no temp files left
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["succeeded"] == 1 and summary["failed"] == 1
    assert "not_a_pdf" in captured.err and "[2/2]" in captured.err


def test_cli_all_ok_raster(tmp_path: Path) -> None:
    src = tmp_path / "form.pdf"
    src.write_bytes(samples.form())
    assert _run([str(src), "--out", str(tmp_path / "o"), "--mode", "raster", "--dpi", "72"]) == 0


def test_cli_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    src = tmp_path / "a.pdf"
    src.write_bytes(samples.form())
    assert _run([str(src), "--out", str(tmp_path / "o"), "--opacity", "7"]) == 2
