"""Synthetic sample PDFs generated in code (no patient data) for the demo, tests and benchmarks:
rotations, box oddities, links, a form, Unicode text, mixed sizes and long documents."""

from __future__ import annotations

import io
from typing import Any

import pikepdf

A4 = (595.0, 842.0)
LETTER = (612.0, 792.0)

_WIN_ANSI_EXTRA = {"\u2013": 0x96, "\u2014": 0x97, "€": 0x80, "\u2019": 0x92}


def _pdf_string(text: str) -> bytes:
    """Encode `text` for a WinAnsi simple font as a PDF literal string."""
    out = bytearray()
    for ch in text:
        code = _WIN_ANSI_EXTRA.get(ch, ord(ch))
        if code > 255:
            code = ord("?")
        if chr(code) in "()\\":
            out.append(ord("\\"))
        out.append(code)
    return b"(" + bytes(out) + b")"


class SampleBuilder:
    """Accumulates pages with text on one shared Helvetica resource dictionary."""

    def __init__(self) -> None:
        self.pdf = pikepdf.new()
        font = pikepdf.Dictionary(
            Type=pikepdf.Name.Font,
            Subtype=pikepdf.Name.Type1,
            BaseFont=pikepdf.Name.Helvetica,
            Encoding=pikepdf.Name.WinAnsiEncoding,
        )
        self.resources = self.pdf.make_indirect(
            pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=self.pdf.make_indirect(font)))
        )

    def page(
        self,
        lines: list[str],
        size: tuple[float, float] = A4,
        origin: tuple[float, float] = (0.0, 0.0),
        **extra: Any,
    ) -> pikepdf.Dictionary:
        x0, y0 = origin
        w, h = size
        fs = max(4.0, min(14.0, h / 8))
        parts = [f"BT /F1 {fs:.1f} Tf {x0 + w * 0.08:.1f} {y0 + h - fs * 1.6:.1f} Td {fs * 1.3:.1f} TL"]
        parts += [_pdf_string(line).decode("latin-1") + " '" for line in lines]
        parts.append("ET")
        content = "\n".join(parts).encode("latin-1")
        page = pikepdf.Dictionary(
            Type=pikepdf.Name.Page,
            MediaBox=pikepdf.Array([x0, y0, x0 + w, y0 + h]),
            Resources=self.resources,
            Contents=self.pdf.make_stream(content),
            **extra,
        )
        self.pdf.pages.append(pikepdf.Page(page))
        return self.pdf.pages[-1].obj

    def to_bytes(self) -> bytes:
        """The same bytes on every call: qpdf's default /ID mixes in the clock, so two calls a second
        apart made "the same upload" differ (a retried submission then looked like another request)."""
        buf = io.BytesIO()
        self.pdf.save(buf, deterministic_id=True)
        return buf.getvalue()


def rotated_pages() -> bytes:
    """Pages with /Rotate 0, 90, 180, 270, plus two pages inheriting /Rotate 90 from an intermediate node."""
    b = SampleBuilder()
    for angle in (0, 90, 180, 270):
        b.page([f"Rotated page: {angle} degrees", "Top of the page text"], Rotate=angle)
    b.page(["Inherits rotation 90"])
    b.page(["Inherits rotation 90 too"], size=LETTER)
    kids = [p.obj for p in b.pdf.pages][4:]
    pages_root = b.pdf.Root.Pages
    node = b.pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Pages, Kids=pikepdf.Array(kids), Count=2, Rotate=90, Parent=pages_root
        )
    )
    for kid in kids:
        kid.Parent = node
    pages_root.Kids = pikepdf.Array([*list(pages_root.Kids)[:4], node])
    return b.to_bytes()


def offset_boxes() -> bytes:
    """Non-zero MediaBox origins (negative and positive) and a CropBox smaller than the MediaBox."""
    b = SampleBuilder()
    b.page(["MediaBox origin (0, -36)"], origin=(0.0, -36.0))
    b.page(
        ["MediaBox origin (50, 50), CropBox inside"],
        size=(300.0, 300.0),
        origin=(50.0, 50.0),
        CropBox=pikepdf.Array([100, 100, 300, 300]),
    )
    b.page(
        ["CropBox much smaller than MediaBox", "rotated 90"],
        CropBox=pikepdf.Array([100, 200, 400, 600]),
        Rotate=90,
    )
    return b.to_bytes()


def links() -> bytes:
    """A URI link and an internal GoTo link (and a /Dest link) between two pages."""
    b = SampleBuilder()
    first = b.page(["Links: external and internal", "https://example.org/docfence", "Go to page 2"])
    second = b.page(["Page 2: target of the internal link"])
    uri = pikepdf.Dictionary(
        Type=pikepdf.Name.Annot,
        Subtype=pikepdf.Name.Link,
        Rect=pikepdf.Array([40, 760, 300, 780]),
        Border=pikepdf.Array([0, 0, 0]),
        A=pikepdf.Dictionary(S=pikepdf.Name.URI, URI=pikepdf.String("https://example.org/docfence")),
    )
    goto = pikepdf.Dictionary(
        Type=pikepdf.Name.Annot,
        Subtype=pikepdf.Name.Link,
        Rect=pikepdf.Array([40, 730, 300, 750]),
        Border=pikepdf.Array([0, 0, 0]),
        A=pikepdf.Dictionary(S=pikepdf.Name.GoTo, D=pikepdf.Array([second, pikepdf.Name.Fit])),
    )
    dest = pikepdf.Dictionary(
        Type=pikepdf.Name.Annot,
        Subtype=pikepdf.Name.Link,
        Rect=pikepdf.Array([40, 700, 300, 720]),
        Dest=pikepdf.Array([second, pikepdf.Name.Fit]),
    )
    first.Annots = b.pdf.make_indirect(pikepdf.Array([b.pdf.make_indirect(a) for a in (uri, goto, dest)]))
    return b.to_bytes()


def form() -> bytes:
    """An AcroForm with one filled text field (widget with its own appearance stream)."""
    b = SampleBuilder()
    page = b.page(["Form: patient reference field below"])
    appearance = b.pdf.make_stream(b"/Tx BMC q BT /F1 12 Tf 2 6 Td (REF-0001) Tj ET Q EMC")
    appearance.Type, appearance.Subtype = pikepdf.Name.XObject, pikepdf.Name.Form
    appearance.BBox = pikepdf.Array([0, 0, 200, 24])
    appearance.Resources = b.resources
    field = b.pdf.make_indirect(
        pikepdf.Dictionary(
            Type=pikepdf.Name.Annot,
            Subtype=pikepdf.Name.Widget,
            FT=pikepdf.Name.Tx,
            T=pikepdf.String("reference"),
            V=pikepdf.String("REF-0001"),
            Rect=pikepdf.Array([60, 700, 260, 724]),
            DA=pikepdf.String("/F1 12 Tf 0 g"),
            AP=pikepdf.Dictionary(N=appearance),
            P=page,
            F=4,
        )
    )
    page.Annots = pikepdf.Array([field])
    b.pdf.Root.AcroForm = pikepdf.Dictionary(
        Fields=pikepdf.Array([field]), DR=b.resources, DA=pikepdf.String("/F1 12 Tf 0 g")
    )
    return b.to_bytes()


def unicode_text() -> bytes:
    """Latin text with accents and typographic punctuation (WinAnsi), extractable as Unicode."""
    b = SampleBuilder()
    b.page(["Vertraulich \u2013 Dr. Müller", "Größe: 12 €, Straße\u2019s café", "Ærø, Ñandú, déjà vu"])
    return b.to_bytes()


def mixed_sizes() -> bytes:
    """A4, Letter, landscape, a 72 x 72 pt page and a 275 x 50 pt strip."""
    b = SampleBuilder()
    for size in (A4, LETTER, (842.0, 595.0), (72.0, 72.0), (275.0, 50.0), (1224.0, 792.0)):
        b.page([f"Page {size[0]:.0f} x {size[1]:.0f} pt"], size=size)
    return b.to_bytes()


def many_pages(count: int, size: tuple[float, float] = A4) -> bytes:
    """`count` text pages (e.g. 200 or 1000) sharing one font resource."""
    b = SampleBuilder()
    body = [f"Line {k}: synthetic report text, no patient data." for k in range(30)]
    for n in range(count):
        b.page([f"Page {n + 1} of {count}", *body], size=size)
    return b.to_bytes()


def all_samples() -> dict[str, bytes]:
    """Every small sample by name (the long documents are generated on demand)."""
    return {
        "rotated": rotated_pages(),
        "offset_boxes": offset_boxes(),
        "links": links(),
        "form": form(),
        "unicode": unicode_text(),
        "mixed_sizes": mixed_sizes(),
    }
