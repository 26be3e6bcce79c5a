"""Repair where the readers agree: damage every reader recovers from the same way is repaired and noted;
the repaired file is then processed only if two independent readers (pdfium and poppler, or qpdf for
encrypted files, whose passwords never go on a command line) read every page of it.

Repaired: a page without a usable MediaBox (the inherited box, else US Letter, the readers' default), a
CropBox reaching outside its MediaBox (clipped; dropped when they do not overlap), leading junk before
%PDF, and xref damage qpdf reconstructs. Refusals stay for what cannot be repaired faithfully:
truncation (no end-of-file marker), passwords not supplied, the owner-password policy.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

import pikepdf
import pypdfium2 as pdfium

from docfence.core.errors import MalformedPdf
from docfence.engines.geometry import as_box, inherited

DEFAULT_MEDIA_BOX = (0.0, 0.0, 612.0, 792.0)  # US Letter: what pdfium and poppler assume
_TIMEOUT_S = 30.0
_PAGES_RE = re.compile(rb"^Pages:\s+(\d+)", re.M)


def _usable(box: tuple[float, float, float, float] | None) -> bool:
    return box is not None and box[2] - box[0] > 0 and box[3] - box[1] > 0


def _normal(box: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
    return (min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]), max(box[1], box[3]))


def repair_boxes(pages: list[pikepdf.Dictionary]) -> list[str]:
    """Fix page boxes in place; returns one note per kind of repair (no document content)."""
    media_fixed, crop_clipped, crop_dropped = [], [], []
    for number, page in enumerate(pages, start=1):
        raw = as_box(inherited(page, "/MediaBox"))
        media = _normal(raw) if raw is not None else None
        if not _usable(media):
            media = DEFAULT_MEDIA_BOX
            page.MediaBox = pikepdf.Array(list(media))
            media_fixed.append(number)
        assert media is not None
        raw_crop = inherited(page, "/CropBox")
        if raw_crop is None:
            continue
        crop = as_box(raw_crop)
        crop = _normal(crop) if crop is not None else None
        if crop is not None and media[0] <= crop[0] and media[1] <= crop[1] and crop[2] <= media[2] \
                and crop[3] <= media[3]:
            continue
        clipped = None if crop is None else (max(crop[0], media[0]), max(crop[1], media[1]),
                                             min(crop[2], media[2]), min(crop[3], media[3]))
        if clipped is not None and _usable(clipped):
            page.CropBox = pikepdf.Array(list(clipped))
            crop_clipped.append(number)
        else:
            page.CropBox = pikepdf.Array(list(media))  # own key: an inherited bad box must not win
            crop_dropped.append(number)
    notes = []
    if media_fixed:
        notes.append(f"repaired: page(s) {_pages(media_fixed)} had no usable MediaBox; US Letter was used, "
                     "as readers do")
    if crop_clipped:
        notes.append(f"repaired: the CropBox of page(s) {_pages(crop_clipped)} reached outside the MediaBox "
                     "and was clipped to it")
    if crop_dropped:
        notes.append(f"repaired: the CropBox of page(s) {_pages(crop_dropped)} did not overlap the MediaBox; "
                     "the MediaBox is shown")
    return notes


def _pages(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")


def structure_notes(data: bytes, pdf: pikepdf.Pdf) -> list[str]:
    """Damage qpdf recovered from while opening (leading junk, xref reconstruction)."""
    notes = []
    if not data.startswith(b"%PDF-"):
        notes.append("repaired: bytes before the %PDF header were ignored")
    if pdf.get_warnings():
        notes.append("repaired: damaged cross-reference data was reconstructed by qpdf")
    if "/Size" not in pdf.trailer:
        pdf.trailer.Size = 0  # qpdf's writer fills in the value, but only for a key that exists
    return notes


def readers_agree(data: bytes, pages: int, password: str | None) -> None:
    """Both pdfium and a second reader must read all `pages` pages of the repaired `data`; raises
    MalformedPdf when either disagrees (the repair is then not trusted)."""
    try:
        doc = pdfium.PdfDocument(data, password=password or None)
        try:
            if len(doc) != pages:
                raise MalformedPdf("The PDF is damaged: readers disagree about its pages after repair.")
            for index in range(pages):
                doc[index].close()
        finally:
            doc.close()
    except pdfium.PdfiumError as exc:
        raise MalformedPdf("The PDF is damaged: its repaired form cannot be read by every reader.") from exc
    if not _second_reader_pages(data, pages, password):
        raise MalformedPdf("The PDF is damaged: readers disagree about its pages after repair.")


def _second_reader_pages(data: bytes, pages: int, password: str | None) -> bool:
    fd, path = tempfile.mkstemp(suffix=".pdf", prefix="docfence-repair-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if password:  # never on a command line: qpdf reads it from stdin
            args, stdin = ["qpdf", "--password-file=-", "--show-npages", path], password.encode() + b"\n"
        else:
            args, stdin = ["pdfinfo", path], None
        try:
            done = subprocess.run(args, input=stdin, capture_output=True, timeout=_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return False
        if password:
            return done.returncode in (0, 3) and done.stdout.strip() == str(pages).encode()
        match = _PAGES_RE.search(done.stdout)
        return done.returncode == 0 and match is not None and int(match.group(1)) == pages
    finally:
        os.unlink(path)
