"""The verification-code stage: a QR code of the job's verification URL drawn on the chosen pages after the
marks were validated, and its proof (the only change is the code; it decodes from a 150 DPI render).

Vector mode draws the modules as filled rectangles in one Form XObject; raster mode draws a 1-bit image
of them at the declared DPI in that form. Either way the form is shared by every page that shows it.
"""

from __future__ import annotations

import io
import math
import zlib
from typing import Any, cast

import pikepdf
import pypdfium2 as pdfium
import segno

from docfence.core.errors import ConfigError, MalformedPdf
from docfence.core.policy import VerificationSpec, WatermarkSpec
from docfence.engines.checks import Check, check, page_ranges
from docfence.engines.geometry import Matrix, PageGeometry, multiply, page_geometry
from docfence.engines.vector import _own_resources, save

DECODE_DPI = 150  # the resolution a phone camera or a scan gives at least; the decode check uses it
QUIET_ZONE = 4  # modules of white around the symbol (the QR standard's minimum)
NAME = "/DfVerify"
_CROP_PAD_PT = 6.0


def matrix(url: str) -> list[list[bool]]:
    """The QR symbol of `url` with its quiet zone, top row first; True is a dark module."""
    symbol = segno.make(url, error="m", micro=False, boost_error=False)
    return [[bool(v) for v in row] for row in symbol.matrix_iter(scale=1, border=QUIET_ZONE)]


def _vector_content(rows: list[list[bool]]) -> bytes:
    """A unit-square drawing: a white square, then each run of dark modules as one rectangle."""
    n = len(rows)
    ops = [f"q 1 g 0 0 1 1 re f {1 / n:.6f} 0 0 {1 / n:.6f} 0 0 cm 0 g"]
    for r, row in enumerate(rows):
        y = n - 1 - r
        c = 0
        while c < n:
            if not row[c]:
                c += 1
                continue
            start = c
            while c < n and row[c]:
                c += 1
            ops.append(f"{start} {y} {c - start} 1 re")
    ops.append("f Q")
    return "\n".join(ops).encode("ascii")


def _image_bytes(rows: list[list[bool]], per_module: int) -> bytes:
    """1 bit per pixel, 0 = black (DeviceGray), each module `per_module` pixels square."""
    out = bytearray()
    for row in rows:
        bits = "".join(("0" if dark else "1") * per_module for dark in row)
        bits += "1" * (-len(bits) % 8)
        line = int(bits, 2).to_bytes(len(bits) // 8, "big")
        out += line * per_module
    return bytes(out)


def build_form(pdf: pikepdf.Pdf, url: str, *, mode: str, dpi: int, size_pt: float) -> pikepdf.Stream:
    """The Form XObject drawing the code in the unit square (the page's matrix scales it)."""
    rows = matrix(url)
    form = pikepdf.Stream(pdf, _vector_content(rows) if mode == "vector" else b"/DfQR Do")
    form.Type, form.Subtype = pikepdf.Name.XObject, pikepdf.Name.Form
    form.BBox = pikepdf.Array([0, 0, 1, 1])
    if mode != "vector":
        per_module = max(1, math.ceil(size_pt / 72.0 * dpi / len(rows)))
        side = per_module * len(rows)
        image = pikepdf.Stream(pdf, zlib.compress(_image_bytes(rows, per_module)))
        image.Type, image.Subtype = pikepdf.Name.XObject, pikepdf.Name.Image
        image.Width = image.Height = side
        image.ColorSpace, image.BitsPerComponent = pikepdf.Name.DeviceGray, 1
        image.Filter = pikepdf.Name.FlateDecode
        image.Interpolate = False
        form.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(DfQR=image))
    return form


def selection(spec: VerificationSpec, count: int) -> list[bool]:
    """Which of `count` pages carry the code (the page grammar parsed once, not once per page)."""
    selector = WatermarkSpec(pages=spec.pages)
    return [selector.page_selected(i, count) for i in range(count)]


def placement(geo: PageGeometry, spec: VerificationSpec) -> tuple[float, float, float]:
    """(x, y, size) of the code in display coordinates of the visible box (origin bottom-left): the
    configured corner, shrunk to fit a page smaller than the code and its margins."""
    width, height = geo.display_size
    size = min(spec.size_pt, width, height)
    margin = max(0.0, min(spec.margin_pt, (width - size) / 2, (height - size) / 2))
    x = margin if spec.corner.endswith("left") else width - margin - size
    y = margin if spec.corner.startswith("bottom") else height - margin - size
    return x, y, size


def draw_op(geo: PageGeometry, spec: VerificationSpec, name: str) -> bytes:
    """The content stream appended to a page: the form at its place, an Artifact for tagged readers."""
    x, y, size = placement(geo, spec)
    m: Matrix = multiply((size, 0.0, 0.0, size, x, y), geo.display_to_user())
    cm = " ".join(f"{v:.4f}" for v in m)
    return f"q /Artifact BMC {cm} cm {name} Do EMC Q".encode("ascii")


def _contents(page: pikepdf.Dictionary) -> list[pikepdf.Stream]:
    contents = page.get("/Contents")
    if isinstance(contents, pikepdf.Array):
        return [c for c in contents if isinstance(c, pikepdf.Stream)]
    return [contents] if isinstance(contents, pikepdf.Stream) else []


def _free_name(xobjects: pikepdf.Dictionary) -> str:
    name = NAME
    while name in xobjects:
        name += "x"
    return name


def stamp(data: bytes, spec: VerificationSpec, *, mode: str, dpi: int, password: str | None = None) -> bytes:
    """`data` (an already validated output) with the code drawn last on every selected page. Nothing
    else changes: other pages keep their dictionaries, selected pages gain one content stream and one
    XObject name in resources of their own (a shared resource dictionary is never edited)."""
    if not spec.url:
        raise ConfigError("the verification code has no URL (set [verification] public_base_url)")
    try:
        pdf = pikepdf.open(io.BytesIO(data), password=password or "")
    except pikepdf.PdfError as exc:
        raise MalformedPdf("the validated output could not be reopened to add its verification code") from exc
    with pdf:
        form: pikepdf.Stream | None = None
        for page, chosen in zip(pdf.pages, selection(spec, len(pdf.pages)), strict=True):
            if not chosen:
                continue
            if form is None:
                form = pdf.make_indirect(build_form(pdf, spec.url, mode=mode, dpi=dpi, size_pt=spec.size_pt))
            geo = page_geometry(page.obj)
            xobjects = cast(pikepdf.Dictionary, _own_resources(page.obj).XObject)
            name = _free_name(xobjects)
            xobjects[name] = form
            op = pikepdf.Stream(pdf, draw_op(geo, spec, name))
            page.obj.Contents = pikepdf.Array([*_contents(page.obj), op])
        return save(pdf, pdf.is_encrypted)


def prove(before: bytes, after: bytes, spec: VerificationSpec, *, mode: str, dpi: int,
          password: str | None = None) -> list[Check]:
    """Two checks: `verification_code_structure` (the code is the only change, drawn as built from the
    URL, on exactly the selected pages) and `verification_code_decodes` (zxing-cpp reads the URL from a
    150 DPI render of each selected page's corner, so what covers or distorts it fails)."""
    pw = password or ""
    with pikepdf.open(io.BytesIO(before), password=pw) as src, \
            pikepdf.open(io.BytesIO(after), password=pw) as out:
        selected = selection(spec, len(src.pages))
        failures = _structure_failures(src, out, spec, selected, mode=mode, dpi=dpi)
        # the output's own selection: when page counts differ, the structure check has failed already
        pages = [i for i, chosen in enumerate(selection(spec, len(out.pages))) if chosen]
        geos = {i: page_geometry(out.pages[i].obj) for i in pages}
    structure = check("verification_code_structure", failures, pages=page_ranges(pages),
                      method="content streams byte-identical but the appended code, XObject names unchanged "
                             "but the code's form, the form as built from the URL")
    decode = check("verification_code_decodes", _decode_failures(after, pw, spec, geos, pages),
                   decoder="zxing-cpp", dpi=DECODE_DPI, pages=page_ranges(pages), url=spec.url)
    return [structure, decode]


def _structure_failures(src: pikepdf.Pdf, out: pikepdf.Pdf, spec: VerificationSpec, selected: list[bool],
                        *, mode: str, dpi: int) -> list[str]:
    if len(src.pages) != len(out.pages):
        return ["page count differs"]
    scratch = pikepdf.new()  # built apart: adding the form to `out` costs ~0.2 s on 2,000 pages
    expected = build_form(scratch, spec.url, mode=mode, dpi=dpi, size_pt=spec.size_pt)
    failures: list[str] = []
    for i, (a, b) in enumerate(zip(src.pages, out.pages, strict=True)):
        problem = _page_problem(a.obj, b.obj, spec, selected[i], expected)
        if problem:
            failures.append(f"page {i + 1}: {problem}")
    return failures


def _page_problem(a: pikepdf.Dictionary, b: pikepdf.Dictionary, spec: VerificationSpec, is_selected: bool,
                  expected: pikepdf.Stream) -> str | None:
    old, new = _contents(a), _contents(b)
    names_a, names_b = _xobject_names(a), _xobject_names(b)
    if set(a.keys()) != set(b.keys()) and set(a.keys()) | {"/Resources"} != set(b.keys()):
        return "page entries changed"
    if not is_selected:
        if not _same_streams(old, new) or names_a != names_b:
            return "changed although the code is not meant for it"
        return None
    added = names_b - names_a
    if not new or not _same_streams(old, new[:-1]) or len(added) != 1:
        return "the code is not the one appended drawing"
    name = added.pop()
    if new[-1].read_bytes() != draw_op(page_geometry(b), spec, name):
        return "the code is not drawn at its place"
    if not _same_form(b.Resources.XObject[name], expected):
        return "the code's form is not the one built from the verification URL"
    return None


def _same_streams(old: list[pikepdf.Stream], new: list[pikepdf.Stream]) -> bool:
    """The same content, stream by stream. Equal encoded bytes under equal filters are the same content
    without decoding (the re-save keeps compressed streams as they were, so this is the common case);
    otherwise the decoded bytes decide."""
    if len(old) != len(new):
        return False
    for a, b in zip(old, new, strict=True):
        if a.get("/Filter") == b.get("/Filter") and a.get("/DecodeParms") == b.get("/DecodeParms") \
                and a.read_raw_bytes() == b.read_raw_bytes():
            continue
        if a.read_bytes() != b.read_bytes():
            return False
    return True


def _xobject_names(page: pikepdf.Dictionary) -> set[str]:
    res = page.get("/Resources")
    xobjects = res.get("/XObject") if isinstance(res, pikepdf.Dictionary) else None
    return set(xobjects.keys()) if isinstance(xobjects, pikepdf.Dictionary) else set()


def _same_form(found: Any, expected: pikepdf.Stream) -> bool:
    if not isinstance(found, pikepdf.Stream) or found.read_bytes() != expected.read_bytes():
        return False
    if found.get("/Subtype") != pikepdf.Name.Form or list(found.get("/BBox", [])) != [0, 0, 1, 1]:
        return False
    if "/Matrix" in found:  # the page's draw operation alone places and scales the code
        return False
    want = expected.get("/Resources")
    if want is None:
        return "/Resources" not in found
    try:
        got, img = found.Resources.XObject.DfQR, want.XObject.DfQR
        return bool(got.read_bytes() == img.read_bytes() and got.Width == img.Width)
    except (AttributeError, KeyError):
        return False


def _decode_failures(data: bytes, pw: str, spec: VerificationSpec, geos: dict[int, PageGeometry],
                     pages: list[int]) -> list[str]:
    import zxingcpp

    qr_only = zxingcpp.BarcodeFormats(zxingcpp.BarcodeFormat.QRCode)
    failures: list[str] = []
    doc = pdfium.PdfDocument(data, password=pw or None)
    try:
        for i in pages:
            width, height = geos[i].display_size
            x, y, size = placement(geos[i], spec)
            crop = (max(0.0, x - _CROP_PAD_PT), max(0.0, y - _CROP_PAD_PT),
                    max(0.0, width - x - size - _CROP_PAD_PT), max(0.0, height - y - size - _CROP_PAD_PT))
            page = doc[i]
            try:
                image = page.render(scale=DECODE_DPI / 72.0, crop=crop, may_draw_forms=True).to_pil()
            finally:
                page.close()
            found = [r.text for r in zxingcpp.read_barcodes(image, formats=qr_only)]
            if spec.url not in found:
                failures.append(f"page {i + 1}: " + (f"decodes to another text ({len(found)} codes)" if found
                                                     else "no QR code decodes"))
    finally:
        doc.close()
    return failures


__all__ = ["DECODE_DPI", "build_form", "matrix", "placement", "prove", "stamp"]
