"""Helpers for the engine tests: the shared corpus path, second-reader checks (qpdf, poppler) and
builders for the planted-defect fixtures (opaque images and stamps, output mutation)."""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pikepdf

from docfence.samples import pdfs

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


def mutate(data: bytes, change: Callable[[pikepdf.Pdf], None]) -> bytes:
    """`data` reopened, changed by `change`, saved: how the planted-defect tests break an output."""
    pdf = pikepdf.open(io.BytesIO(data), inherit_page_attributes=False)  # keep the page tree as it is
    change(pdf)
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def opaque_image(pdf: pikepdf.Pdf, gray: int = 255) -> pikepdf.Stream:
    """A 4 x 4 opaque one-colour image XObject (scaled to a whole page, it hides what is drawn below)."""
    image = pdf.make_stream(bytes([gray]) * 16)
    image.Type, image.Subtype = pikepdf.Name.XObject, pikepdf.Name.Image
    image.Width, image.Height, image.BitsPerComponent = 4, 4, 8
    image.ColorSpace = pikepdf.Name.DeviceGray
    return image


def cover_with_image(page: pikepdf.Dictionary, pdf: pikepdf.Pdf, name: str = "/Cover") -> bytes:
    """Register an opaque image on `page` and return content that draws it over the whole MediaBox."""
    x0, y0, x1, y1 = (float(v) for v in page.MediaBox)
    page.Resources.XObject[name] = opaque_image(pdf)
    return f"q {x1 - x0:.2f} 0 0 {y1 - y0:.2f} {x0:.2f} {y0:.2f} cm {name} Do Q\n".encode("ascii")


def scanned_pages(count: int) -> bytes:
    """Pages that are one opaque full-page image under a line of text, like a scan with an OCR layer."""
    builder = pdfs.SampleBuilder()
    for n in range(count):
        page = builder.page([f"Scanned page {n + 1}"])
        page.Resources = pikepdf.Dictionary(Font=builder.resources.Font, XObject=pikepdf.Dictionary())
        cover = builder.pdf.make_stream(cover_with_image(page, builder.pdf))
        page.Contents = pikepdf.Array([cover, page.Contents])
    return builder.to_bytes()


def opaque_stamp_page(count: int = 12, stamped: int = 5) -> bytes:
    """`count` text pages; page `stamped` (0-based) lies under an opaque full-page Stamp annotation (its
    appearance is drawn above the content and above an overlay mark)."""
    builder = pdfs.SampleBuilder()
    for n in range(count):
        builder.page([f"Page {n + 1}" + (": text under an opaque stamp" if n == stamped else "")])
    page = builder.pdf.pages[stamped].obj
    appearance = builder.pdf.make_stream(b"q 1 g 0 0 595 842 re f Q")
    appearance.Type, appearance.Subtype = pikepdf.Name.XObject, pikepdf.Name.Form
    appearance.BBox = pikepdf.Array([0, 0, 595, 842])
    stamp = pikepdf.Dictionary(
        Type=pikepdf.Name.Annot,
        Subtype=pikepdf.Name.Stamp,
        Rect=pikepdf.Array([0, 0, 595, 842]),
        AP=pikepdf.Dictionary(N=appearance),
        F=4,
    )
    page.Annots = pikepdf.Array([builder.pdf.make_indirect(stamp)])
    return builder.to_bytes()


def remapped_font_pages(count: int = 2) -> bytes:
    """Text pages whose font re-encodes codes (/Differences: 'a' shows and extracts as 'z'), so the text a
    reader extracts depends on that font resource: losing or renaming it changes the extracted text."""
    builder = pdfs.SampleBuilder()
    font = builder.resources.Font.F1
    font.Encoding = pikepdf.Dictionary(
        Type=pikepdf.Name.Encoding,
        BaseEncoding=pikepdf.Name.WinAnsiEncoding,
        Differences=pikepdf.Array([97, pikepdf.Name.z]),
    )
    for n in range(count):
        builder.page([f"Page {n + 1}: a remapped alphabet, banana and avocado"])
    return builder.to_bytes()
