"""Repair where the readers agree: damage every reader recovers from the same way is repaired and noted;
the repaired file is then processed only if two independent readers (pdfium and poppler, or qpdf for
encrypted files, whose passwords never go on a command line) read every page of it.

Repaired: a page without a usable MediaBox (the inherited box, else US Letter, the readers' default), a
CropBox reaching outside its MediaBox (clipped; dropped when they do not overlap), leading junk before
%PDF, a damaged header ("%PDF.1.4"), a missing or cut end-of-file marker after a complete trailer, a page
/Contents entry that is no stream (a missing object, or one that lost its `stream` keyword: readers
draw nothing for it), page content that ends inside a string, array, dictionary or text object (which
would swallow the marks drawn after it: it is closed where it ends, which draws nothing), and xref
damage qpdf reconstructs. Refusals stay for what cannot be repaired
faithfully: truncation (no complete trailer at the end), passwords not supplied, the owner-password policy.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import pikepdf
import pypdfium2 as pdfium

from docfence.core.errors import MalformedPdf
from docfence.engines.geometry import as_box, inherited

DEFAULT_MEDIA_BOX = (0.0, 0.0, 612.0, 792.0)  # US Letter: what pdfium and poppler assume
_TIMEOUT_S = 30.0
_PAGES_RE = re.compile(rb"^Pages:\s+(\d+)", re.M)
# a header whose separator or version is damaged ("%PDF.1.4", "%PDF-14"): readers still take it for one
_DAMAGED_HEADER_RE = re.compile(rb"%PDF[^\r\n]{0,3}\d")
# the last revision is complete: `startxref <offset>` ends the file, followed at most by a piece of the
# end-of-file marker ("%%EO", "EOF"); a file cut anywhere before that does not match
_COMPLETE_TAIL_RE = re.compile(rb"startxref\s+\d+\s*%{0,2}E?O?F?\s*\Z")


def has_header(data: bytes) -> bool:
    """A PDF header in the first 1024 bytes, intact or with a damaged separator or version."""
    head = data[:1024]
    return b"%PDF-" in head or _DAMAGED_HEADER_RE.search(head) is not None


def complete_without_eof(data: bytes) -> bool:
    """No %%EOF, yet the file ends with a complete trailer (`startxref` and its offset): only the
    end-of-file marker is missing or cut, which every reader tolerates; it is no truncation."""
    return b"%%EOF" not in data[-1024:] and _COMPLETE_TAIL_RE.search(data[-64:]) is not None


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
        notes.append(f"repaired: page(s) {page_list(media_fixed)} had no usable MediaBox; US Letter was "
                     "used, as readers do")
    if crop_clipped:
        notes.append(f"repaired: the CropBox of page(s) {page_list(crop_clipped)} reached outside the "
                     "MediaBox and was clipped to it")
    if crop_dropped:
        notes.append(f"repaired: the CropBox of page(s) {page_list(crop_dropped)} did not overlap the "
                     "MediaBox; the MediaBox is shown")
    return notes


def repair_contents(pages: list[pikepdf.Dictionary]) -> list[str]:
    """Drop each page /Contents entry that is no stream, in place: a reference to a missing object (null)
    or an object that lost its `stream` keyword (a dictionary). qpdf, poppler and mupdf all ignore such an
    entry and draw the page's other streams (none: an empty page). Returns one note (no content)."""
    fixed = []
    for number, page in enumerate(pages, start=1):
        contents = page.get("/Contents")
        if contents is None or isinstance(contents, pikepdf.Stream):
            continue
        if isinstance(contents, pikepdf.Array):
            kept = [item for item in contents if isinstance(item, pikepdf.Stream)]
            if len(kept) == len(contents):
                continue
            page.Contents = pikepdf.Array(kept)
        else:
            del page["/Contents"]
        fixed.append(number)
    if not fixed:
        return []
    return [f"repaired: page(s) {page_list(fixed)} named content that is not a stream (a missing object, or "
            "one without its stream data); it was dropped, as readers draw nothing for it"]


# what changes the syntax state (searched for, so the bytes between are skipped at C speed): delimiters,
# and the operators BT, ET, BI, ID as whole tokens (not inside a longer token or a /Name)
_SYNTAX_RE = re.compile(rb"[()\[\]%<>]|(?<![^ \t\r\n\x0c\x00()<>\[\]{}%])(?:BT|ET|BI|ID)"
                        rb"(?![^ \t\r\n\x0c\x00()<>\[\]{}/%])")
_IN_STRING_RE = re.compile(rb"[()\\]")
_EI_RE = re.compile(rb"[ \t\r\n\x0c\x00]EI(?=[ \t\r\n\x0c\x00]|\Z)")
_EOL_RE = re.compile(rb"[\r\n]")


@dataclass
class _Lexed:
    """Where a content stream's syntax stands at its end: what is still open."""

    strings: int = 0  # nesting depth of an unterminated literal string
    arrays: int = 0
    dicts: int = 0
    text: bool = False  # inside BT ... (no ET)
    image: bool = False  # inside an inline image (BI without its ID, or its data without EI)

    def closer(self) -> bytes:
        """The bytes that close what is open, in order (they draw nothing); empty when nothing is, or
        when an inline image is open (closing it would draw an image: left to the validator's render)."""
        if self.image or not (self.strings or self.arrays or self.dicts or self.text):
            return b""
        return b")" * self.strings + b"\n" + b"]" * self.arrays + b">>" * self.dicts + \
            (b" ET" if self.text else b"") + b"\n"


def _string_end(data: bytes, i: int) -> tuple[int, int]:
    """(index after the literal string opening at `i`, its depth still open at the end of `data`)."""
    depth, i = 1, i + 1
    while depth:
        found = _IN_STRING_RE.search(data, i)
        if found is None:
            return len(data), depth
        i = found.end() + (found.group() == b"\\")  # a backslash escapes the byte after it
        depth += {b"(": 1, b")": -1}.get(found.group(), 0)
    return i, 0


def _step(data: bytes, token: bytes, i: int, state: _Lexed) -> int:
    """Apply one syntax token ending at `i`; returns where to search on (len(data) to stop)."""
    if token == b"(":
        i, state.strings = _string_end(data, i - 1)
    elif token == b"%":
        eol = _EOL_RE.search(data, i)
        i = eol.start() if eol else len(data)
    elif token in (b"<", b">"):
        if data.startswith(token, i):  # << or >>
            state.dicts = max(0, state.dicts + (1 if token == b"<" else -1))
            i += 1
        elif token == b"<":  # <hex string>
            close = data.find(b">", i)
            i = len(data) if close < 0 else close + 1
    elif token in (b"[", b"]"):
        state.arrays = max(0, state.arrays + (1 if token == b"[" else -1))
    elif token in (b"BT", b"ET"):
        state.text = token == b"BT"
    elif token == b"BI":
        state.image = True
    elif token == b"ID" and state.image:  # inline image data up to EI: no syntax inside
        image_end = _EI_RE.search(data, i)
        state.image = image_end is None
        i = len(data) if image_end is None else image_end.end()
    return i  # a stray ) or an ID outside an image: readers skip it


def lex_end(data: bytes) -> _Lexed:
    """What is left open where the content `data` ends, read as readers read content syntax."""
    state, i = _Lexed(), 0
    while (found := _SYNTAX_RE.search(data, i)) is not None:
        i = _step(data, found.group(), found.end(), state)
        if state.strings:
            break
    return state


def _suspect(data: bytes) -> bool:
    """A cheap screen (byte counts, C speed): only content that may end open is lexed. A miss is caught
    by the validator's render (the mark not drawn), never a silent wrong output."""
    opened, closed = data.count(b"(") - data.count(b"\\("), data.count(b")") - data.count(b"\\)")
    return opened != closed or data.count(b"[") != data.count(b"]") or \
        data.count(b"<<") != data.count(b">>") or data.count(b"BT") != data.count(b"ET")


def close_open_content(pdf: pikepdf.Pdf, pages: list[pikepdf.Dictionary]) -> list[str]:
    """Append, to each page whose content ends inside a string, array, dictionary or text object, a stream
    closing them. Readers concatenate a page's streams, so an unterminated string in a damaged page
    swallows every mark drawn after it; where the page's content ends nothing more is drawn, so the
    closing draws nothing. Returns one note (no content)."""
    fixed = []
    for number, page in enumerate(pages, start=1):
        contents = page.get("/Contents")
        streams = [contents] if isinstance(contents, pikepdf.Stream) else list(contents or [])
        try:
            data = b"\n".join(s.read_bytes() for s in streams if isinstance(s, pikepdf.Stream))
        except pikepdf.PdfError:
            continue  # content that does not decode is refused by the content check, as corrupt_content
        closer = lex_end(data).closer() if _suspect(data) else b""
        if closer:
            page.Contents = pikepdf.Array([*streams, pdf.make_stream(closer)])
            fixed.append(number)
    if not fixed:
        return []
    return [f"repaired: the content of page(s) {page_list(fixed)} ended inside a string, array or text "
            "object, which would swallow what is drawn after it; it was closed where it ends (drawing "
            "nothing), as the marks are drawn after it"]


def page_list(numbers: list[int]) -> str:
    """Page numbers for a note: the first ten, then how many more."""
    shown = ", ".join(str(n) for n in numbers[:10])
    return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")


def structure_notes(data: bytes, pdf: pikepdf.Pdf) -> list[str]:
    """Damage qpdf recovered from while opening (leading junk, xref reconstruction)."""
    notes = []
    header = data.find(b"%PDF-", 0, 1024)
    if header < 0:
        notes.append("repaired: the %PDF header is damaged; the file was read as a PDF, as readers do")
    elif header > 0:
        notes.append("repaired: bytes before the %PDF header were ignored")
    if complete_without_eof(data):
        notes.append("repaired: the end-of-file marker was missing or cut after a complete trailer")
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
