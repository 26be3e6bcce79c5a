"""A second reading of an output from its bytes: libqpdf's full read or `qpdf --check` (structure; in
process) and poppler's `pdfinfo -box` (page count, boxes and rotation per page, linearization flag; an
independent reader, run as a bounded subprocess). A failure says what the reader saw: its values or its
own message, capped (checks.tool_message). A libqpdf warning about data kept byte for byte from the input
(a Flate stream without its end, page content syntax) that the input gives as often is not a failure."""

from __future__ import annotations

import functools
import io
import os
import re
import subprocess
import tempfile
import warnings
from collections import Counter
from typing import Any, BinaryIO, cast

import pikepdf

from docfence.engines.checks import MAX_DETAILS, bounded, tool_message
from docfence.engines.geometry import PageGeometry
from docfence.engines.parallel import Forked

_TIMEOUT_S = 60.0
_BOX_RE = re.compile(
    r"^Page\s+(\d+)\s+(MediaBox|CropBox):\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)", re.M
)
_ROT_RE = re.compile(r"^Page\s+(\d+)\s+rot:\s+(-?\d+)", re.M)
_PAGES_RE = re.compile(r"^Pages:\s+(\d+)", re.M)
_MESSAGE_BYTES = 4096  # of pdfinfo's error output, read when it failed


class _Poppler:
    """`pdfinfo` running on its own: it writes its report to an unnamed temporary file, never to a pipe.
    Through a pipe, a long report (~700 KB for 2,000 pages) filled the 64 KB buffer within the first
    pages and pdfinfo then waited for `finish`, doing the rest of its reading after every other check
    was done instead of beside them. Its warnings go nowhere: only its report is read."""

    def __init__(self, args: list[str]) -> None:
        self.report = tempfile.TemporaryFile()  # noqa: SIM115 (closed by finish, or below)
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.report,
                                         stderr=subprocess.DEVNULL)
        except BaseException:
            self.report.close()
            raise

    def stop(self) -> None:
        """Kill it (if it still runs), reap it and close its report."""
        with self.report:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()

    def finish(self) -> tuple[int, str]:
        """(exit code, report); (-1, "") when it ran out of time (it is stopped)."""
        try:
            code = self.proc.wait(timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.stop()
            return -1, ""
        with self.report:
            self.report.seek(0)
            return code, self.report.read().decode("utf-8", "replace")


def pdfinfo_message(path: str) -> str:
    """What pdfinfo says (on stderr) about the file it failed to read: run again, with its error output
    kept this time (to a file, bounded by _TIMEOUT_S). Only on the failure path: the run that judges
    the file sends its warnings nowhere."""
    with tempfile.TemporaryFile() as errors:
        try:
            subprocess.run(["pdfinfo", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=errors, timeout=_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return "pdfinfo: no answer in time"
        errors.seek(0)
        text = errors.read(_MESSAGE_BYTES).decode("utf-8", "replace")
    return f"pdfinfo: {tool_message(text, path)}"


def _pdfinfo_ended(code: int, path: str) -> str:
    if code == -1:
        return "pdfinfo: no answer in time"
    return pdfinfo_message(path) if code > 0 else f"pdfinfo: ended by signal {-code}"


def poppler_failures(text: str, expected: list[PageGeometry]) -> list[str]:
    """Compare poppler's view of every page with the geometry pikepdf reads from the same file."""
    return [failure for failure, _ in poppler_findings(text, expected)]


def poppler_findings(text: str, expected: list[PageGeometry]) -> list[tuple[str, str]]:
    """(failure, what poppler saw) per page poppler sees otherwise than pikepdf, at most MAX_DETAILS."""
    pages = _PAGES_RE.search(text)
    if not pages or int(pages.group(1)) != len(expected):
        seen = f"pdfinfo: {pages.group(1) if pages else 'no'} pages, {len(expected)} expected"
        return [("poppler: page count differs", seen)]
    failures: list[tuple[str, str]] = []
    rotations = {int(m.group(1)): int(m.group(2)) % 360 for m in _ROT_RE.finditer(text)}
    boxes: dict[tuple[int, str], tuple[float, ...]] = {
        (int(m.group(1)), m.group(2)): tuple(float(m.group(k)) for k in range(3, 7))
        for m in _BOX_RE.finditer(text)
    }
    for n, geo in enumerate(expected, start=1):
        crop = boxes.get((n, "CropBox"))
        media = boxes.get((n, "MediaBox"))
        if len(failures) >= MAX_DETAILS:
            break
        if rotations.get(n) != geo.rotate:
            rotation = rotations.get(n, "absent")
            failures.append((f"poppler: page {n} rotation differs",
                             f"pdfinfo: page {n} rotation {rotation}, {geo.rotate} expected"))
        if (
            media is None
            or crop is None
            or any(abs(a - b) > 0.02 for a, b in zip(media + crop, geo.media + geo.crop, strict=True))
        ):
            failures.append((f"poppler: page {n} boxes differ", f"pdfinfo: page {n} MediaBox {_box(media)} "
                             f"CropBox {_box(crop)}, expected {_box(geo.media)} {_box(geo.crop)}"))
    if re.search(r"^Optimized:\s+yes", text, re.M):
        failures.append(("poppler: output claims linearization", "pdfinfo: Optimized: yes"))
    return failures


def _box(box: tuple[float, ...] | None) -> str:
    return "absent" if box is None else "[" + " ".join(f"{v:g}" for v in box) + "]"


class _Discard(io.RawIOBase):
    """A seekable sink: libqpdf writes the whole file into it and nothing is kept."""

    def __init__(self) -> None:
        super().__init__()
        self._at = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._at += len(data)
        return len(data)

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._at = offset if whence == io.SEEK_SET else self._at + offset
        return self._at


def qpdf_read(
    data: bytes, password: str | None, *, parse_content: bool, source: bytes | None = None
) -> list[str]:
    """libqpdf re-reads `data` from its bytes, as the qpdf command does, in this process (pikepdf is
    libqpdf; a `qpdf` subprocess cost ~3.5 ms of CPU per job, nearly all of it process start-up). With
    `parse_content`, pikepdf's step-by-step `qpdf --check` (structures, every stream decoded, every page's
    content parsed); else a full write to nowhere that reads every object and decodes every stream
    (`--decode-level=generalized`), which skips the content parse the validator proved unneeded. Any
    reader warning or error is a failure, but for warnings about data the output keeps byte for byte
    from `source` (the input the validator compares with): a stream's compressed data or a page's content
    syntax that `source` gives the same warning for, as many times (inherited, not introduced)."""
    method = qpdf_method(parse_content)
    problems = _qpdf_problems(data, password, parse_content)
    if isinstance(problems, str):
        return [f"{method} failed ({problems})"]
    if problems and source is not None:
        problems = _introduced(problems, _qpdf_problems(source, password, parse_content))
    if not problems:
        return []
    return [f"{method} found {len(problems)} problem(s), the first: {tool_message(str(problems[0]))}"]


def _qpdf_problems(data: bytes, password: str | None, parse_content: bool) -> list[str] | str:
    """libqpdf's warnings on `data` (see qpdf_read), or why it could not read it."""
    try:
        with pikepdf.open(io.BytesIO(data), password=password or "", inherit_page_attributes=False) as pdf:
            if parse_content:
                return [str(p) for p in pdf.check_pdf_syntax()]
            with warnings.catch_warnings():  # about saving form widgets: nothing is saved
                warnings.simplefilter("ignore", pikepdf.PageCopyWarning)
                pdf.save(cast(BinaryIO, _Discard()), compress_streams=False, fix_metadata_version=False,
                         stream_decode_level=pikepdf.StreamDecodeLevel.generalized)
            return [str(p) for p in pdf.get_warnings()]
    except (pikepdf.PdfError, pikepdf.PasswordError) as exc:  # our own password must open our output
        return f"{type(exc).__name__}: {tool_message(str(exc))}"


# Warnings about data the vector output keeps byte for byte: a Flate stream without its end marker
# (zlib decodes all of it) and page content syntax. Structure warnings (xref, trailer, objects) never
# are inherited: the output's structure is written anew, so any there is the output's own.
_KEPT_DATA_RE = re.compile(r"input stream is complete but output may still be valid|\(content, offset \d+\)")
_LOCATION_RE = re.compile(r"^.*?\(((?:content, )?)offset \d+\):\s*")


def _introduced(found: list[str], inherited: list[str] | str) -> list[str]:
    """The warnings of `found` the input does not give as often (compared without object numbers and
    offsets, which a rewrite changes)."""
    if isinstance(inherited, str):
        return found
    left = Counter(_LOCATION_RE.sub(r"\1", w) for w in inherited if _KEPT_DATA_RE.search(w))
    introduced = []
    for warning in found:
        key = _LOCATION_RE.sub(r"\1", warning)
        if _KEPT_DATA_RE.search(warning) and left[key] > 0:
            left[key] -= 1
        else:
            introduced.append(warning)
    return introduced


def qpdf_method(parse_content: bool) -> str:
    return ("qpdf --check (libqpdf, in process)" if parse_content
            else "qpdf full read (libqpdf, in process: every object and stream)")


class SecondReader:
    """Two re-readings of an output from its bytes, started while the caller does its own checks;
    `finish` collects both. libqpdf must read it without warnings (see qpdf_read: run in a forked
    process beside the caller's work when `background`, else at `finish`); poppler's `pdfinfo`, a
    reader independent of both libqpdf and pdfium, runs as a bounded subprocess on a temporary copy and
    must see every page with the expected geometry (unencrypted only: passwords are never put on a
    command line)."""

    def __init__(
        self, data: bytes, password: str | None, pages: int, *, parse_content: bool = True,
        background: bool = False, source: bytes | None = None,
    ) -> None:
        self.data, self.password, self.parse_content, self.source = data, password, parse_content, source
        self.qpdf_method = qpdf_method(parse_content)
        self.structure = (
            Forked(functools.partial(qpdf_read, data, password, parse_content=parse_content, source=source))
            if background else None
        )
        self.path: str | None = None
        self.poppler: _Poppler | None = None
        if password:
            return
        fd, self.path = tempfile.mkstemp(suffix=".pdf", prefix="docfence-check-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            self.poppler = _Poppler(["pdfinfo", "-box", "-f", "1", "-l", str(pages), self.path])
        except BaseException:
            os.unlink(self.path)
            if self.structure is not None:
                self.structure.result()  # reaped, not left behind
            raise

    def finish(self, expected: list[PageGeometry]) -> dict[str, Any]:
        try:
            found = (qpdf_read(self.data, self.password, parse_content=self.parse_content, source=self.source)
                     if self.structure is None else self.structure.result())
            failures = found if found is not None else [f"{self.qpdf_method} did not complete"]
            details = list(failures)
            if self.poppler is not None and self.path is not None:
                p_code, text = self.poppler.finish()
                if p_code == 0:
                    findings = poppler_findings(text, expected)
                    failures += [f for f, _ in findings]
                    details += [d for _, d in findings]
                else:
                    failures.append(f"pdfinfo failed (exit {p_code})")
                    details.append(_pdfinfo_ended(p_code, self.path))
        except BaseException:
            if self.poppler is not None:
                self.poppler.stop()  # killed and reaped, its report closed: nothing left behind
            raise
        finally:
            if self.path is not None:
                os.unlink(self.path)
        readers = [self.qpdf_method] if self.password else [self.qpdf_method, "poppler pdfinfo -box"]
        return {
            "name": "second_reader",
            "ok": not failures,
            "failures": failures[:MAX_DETAILS],
            "readers": readers,
            "pages": f"1-{len(expected)}" if expected else "",
            **({"details": bounded(details)} if failures else {}),
        }


def second_reader_check(data: bytes, password: str | None, expected: list[PageGeometry]) -> dict[str, Any]:
    """Both readers on `data` (see SecondReader)."""
    return SecondReader(data, password, len(expected)).finish(expected)
