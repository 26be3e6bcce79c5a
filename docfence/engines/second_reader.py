"""A second, independent reading of an output: `qpdf --check` (structure) and poppler's `pdfinfo -box`
(page count, boxes and rotation per page, linearization flag), run as bounded subprocesses."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import Any

from docfence.engines.geometry import PageGeometry

_TIMEOUT_S = 60.0
_BOX_RE = re.compile(
    r"^Page\s+(\d+)\s+(MediaBox|CropBox):\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)", re.M
)
_ROT_RE = re.compile(r"^Page\s+(\d+)\s+rot:\s+(-?\d+)", re.M)
_PAGES_RE = re.compile(r"^Pages:\s+(\d+)", re.M)


def _spawn(args: list[str], stdin: bytes | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _send(proc: subprocess.Popen[bytes], stdin: bytes) -> None:
    """Write all of stdin and close it, so the reader runs while the caller works."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    proc.stdin = None


def _finish(proc: subprocess.Popen[bytes], stdin: bytes | None) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(stdin, timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return -1, ""
    return proc.returncode, out.decode("utf-8", "replace")


def poppler_failures(text: str, expected: list[PageGeometry]) -> list[str]:
    """Compare poppler's view of every page with the geometry pikepdf reads from the same file."""
    pages = _PAGES_RE.search(text)
    if not pages or int(pages.group(1)) != len(expected):
        return ["poppler: page count differs"]
    failures = []
    rotations = {int(m.group(1)): int(m.group(2)) % 360 for m in _ROT_RE.finditer(text)}
    boxes: dict[tuple[int, str], tuple[float, ...]] = {
        (int(m.group(1)), m.group(2)): tuple(float(m.group(k)) for k in range(3, 7))
        for m in _BOX_RE.finditer(text)
    }
    for n, geo in enumerate(expected, start=1):
        crop = boxes.get((n, "CropBox"))
        media = boxes.get((n, "MediaBox"))
        if rotations.get(n) != geo.rotate:
            failures.append(f"poppler: page {n} rotation differs")
        if (
            media is None
            or crop is None
            or any(abs(a - b) > 0.02 for a, b in zip(media + crop, geo.media + geo.crop, strict=True))
        ):
            failures.append(f"poppler: page {n} boxes differ")
    if re.search(r"^Optimized:\s+yes", text, re.M):
        failures.append("poppler: output claims linearization")
    return failures


# qpdf reads every object and decodes every stream while rewriting the file to nowhere; `--check` also
# parses every page content stream, which costs ~4x as much on text-dense pages and adds nothing when the
# validator has proved those streams byte-identical to the input's (which preflight parsed).
_QPDF_READ = ["--decode-level=generalized", "--compress-streams=n"]


class SecondReader:
    """qpdf and poppler's pdfinfo started on a temporary copy of the output, running while the caller
    does its own checks; `finish` collects both. qpdf must read it without warnings (`--check` when
    `parse_content`, else a full read that decodes every stream); poppler must see every page with the
    expected geometry (unencrypted only: passwords are never put on a command line)."""

    def __init__(self, data: bytes, password: str | None, pages: int, *, parse_content: bool = True) -> None:
        fd, self.path = tempfile.mkstemp(suffix=".pdf", prefix="docfence-check-")
        self.password = password
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            self.pw_stdin = (password or "").encode("utf-8") + b"\n"
            how = ["--check", self.path] if parse_content else [*_QPDF_READ, self.path, os.devnull]
            self.qpdf = _spawn(["qpdf", "--password-file=-", *how], self.pw_stdin)
            self.qpdf_method = "qpdf --check" if parse_content else "qpdf full read (every object and stream)"
            _send(self.qpdf, self.pw_stdin)  # qpdf starts now, not when finish() is called
            poppler_args = ["pdfinfo", "-box", "-f", "1", "-l", str(pages), self.path]
            self.poppler = None if password else _spawn(poppler_args, None)
        except BaseException:
            os.unlink(self.path)
            raise

    def finish(self, expected: list[PageGeometry]) -> dict[str, Any]:
        failures: list[str] = []
        try:
            code, _ = _finish(self.qpdf, None)
            if code != 0:
                failures.append(f"{self.qpdf_method} failed (exit {code})")
            if self.poppler is not None:
                p_code, text = _finish(self.poppler, None)
                failures += (
                    poppler_failures(text, expected) if p_code == 0 else [f"pdfinfo failed (exit {p_code})"]
                )
        finally:
            os.unlink(self.path)
        readers = [self.qpdf_method] if self.password else [self.qpdf_method, "poppler pdfinfo -box"]
        return {
            "name": "second_reader",
            "ok": not failures,
            "failures": failures[:10],
            "readers": readers,
            "pages": f"1-{len(expected)}" if expected else "",
        }


def second_reader_check(data: bytes, password: str | None, expected: list[PageGeometry]) -> dict[str, Any]:
    """Both readers on `data`, waited for at once (see SecondReader)."""
    return SecondReader(data, password, len(expected)).finish(expected)
