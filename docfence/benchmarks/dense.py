"""Dense benchmark pages generated in code (seeded, no real or patient data): a heading, ~60 lines of
body text, a footer and four links (two URI, two internal GoTo) on every Letter page, plus the one-page
overlay stamp a `qpdf --overlay` baseline uses. Equivalent in kind to ../shared/bench's corpus."""

from __future__ import annotations

import io
import random

import pikepdf

LETTER = (612.0, 792.0)
WORDS = ("record", "visit", "dose", "plan", "review", "note", "summary", "follow-up", "clinic", "result",
         "measure", "value", "stable", "normal", "within", "range", "report", "signed", "issued", "synthetic")


def dense_pdf(pages: int, seed: int = 20240611) -> bytes:
    rng = random.Random(seed)
    pdf = pikepdf.new()
    fonts = pikepdf.Dictionary(
        F1=pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1,
                                                BaseFont=pikepdf.Name("/Helvetica-Bold"))),
        F2=pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1,
                                                BaseFont=pikepdf.Name("/Helvetica"))),
    )
    for number in range(1, pages + 1):
        page = pdf.add_blank_page(page_size=LETTER)
        page.obj.Resources = pikepdf.Dictionary(Font=fonts)
        page.obj.Contents = pdf.make_stream(_content(number, rng))
    for index, page in enumerate(pdf.pages):
        page.obj.Annots = pdf.make_indirect(pikepdf.Array(_links(pdf, index, len(pdf.pages))))
    out = io.BytesIO()
    pdf.save(out, deterministic_id=True)
    return out.getvalue()


def _content(number: int, rng: random.Random) -> bytes:
    lines = [f"BT /F1 16 Tf 56 740 Td (Synthetic report, page {number}) Tj ET", "BT /F2 9 Tf 56 712 Td 11 TL"]
    for _ in range(58):
        text = " ".join(rng.choice(WORDS) for _ in range(16))
        lines.append(f"({text}) '")
    lines.append("ET")
    lines.append(f"BT /F2 8 Tf 56 30 Td (page {number} - generated benchmark document) Tj ET")
    return "\n".join(lines).encode("latin-1")


def _links(pdf: pikepdf.Pdf, index: int, count: int) -> list[pikepdf.Object]:
    annots: list[pikepdf.Object] = []
    for slot in range(4):
        rect = pikepdf.Array([56 + slot * 130, 60, 56 + slot * 130 + 110, 74])
        if slot < 2:
            action = pikepdf.Dictionary(S=pikepdf.Name.URI, URI=pikepdf.String(f"https://example.org/{slot}"))
        else:
            target = pdf.pages[(index + slot) % count].obj
            action = pikepdf.Dictionary(S=pikepdf.Name.GoTo, D=pikepdf.Array([target, pikepdf.Name.Fit]))
        annot = pikepdf.Dictionary(Type=pikepdf.Name.Annot, Subtype=pikepdf.Name.Link, Rect=rect,
                                   Border=pikepdf.Array([0, 0, 0]), A=action)
        annots.append(pdf.make_indirect(annot))
    return annots


def stamp_pdf(text: str = "CONFIDENTIAL - recipient 1234") -> bytes:
    """A one-page overlay: semi-transparent diagonal text, for `qpdf --overlay stamp.pdf`."""
    pdf = pikepdf.new()
    page = pdf.add_blank_page(page_size=LETTER)
    font = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1,
                                                BaseFont=pikepdf.Name("/Helvetica-Bold")))
    gs = pikepdf.Dictionary(Type=pikepdf.Name.ExtGState, ca=0.25, CA=0.25)
    page.obj.Resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font),
                                            ExtGState=pikepdf.Dictionary(G1=gs))
    page.obj.Contents = pdf.make_stream(
        f"q /G1 gs 0.8 0 0 rg BT /F1 48 Tf 0.707 0.707 -0.707 0.707 120 200 Tm ({text}) Tj ET Q".encode())
    out = io.BytesIO()
    pdf.save(out, deterministic_id=True)
    return out.getvalue()
