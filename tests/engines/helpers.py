"""Helpers for the engine tests: the shared corpus path and second-reader checks (qpdf, poppler)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CORPUS = Path(__file__).parents[2].parent / "shared" / "corpus"
UNICODE_MARK = "Vertraulich \u2013 Dr. Müller / 患者"


def qpdf_check(data: bytes, tmp_path: Path, password: str = "") -> None:
    path = tmp_path / "check.pdf"
    path.write_bytes(data)
    result = subprocess.run(
        ["qpdf", "--password-file=-", "--check", str(path)],
        input=password.encode() + b"\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout.decode()[-500:]


def poppler_renders(data: bytes, tmp_path: Path, pages: int) -> None:
    """The second reader (poppler's pdftoppm) renders every page without error."""
    assert shutil.which("pdftoppm"), "poppler-utils is required"
    path = tmp_path / "render.pdf"
    path.write_bytes(data)
    result = subprocess.run(
        ["pdftoppm", "-r", "10", "-gray", str(path), str(tmp_path / "pg")],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr.decode()[-500:]
    assert len(list(tmp_path.glob("pg*.pgm"))) == pages
