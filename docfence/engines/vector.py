"""Vector (structure-preserving) watermarking: one shared Form XObject per page geometry, drawn in a
q/Q-isolated overlay or underlay marked as a pagination artifact. Text, fonts, links, annotations, forms,
outlines, tags and page boxes are untouched; encryption is kept; a PDF/A claim is withdrawn."""

from __future__ import annotations

import io
import logging
from typing import cast

import pikepdf

from docfence.core.errors import ConfigError, MalformedPdf
from docfence.core.policy import JobPolicy, WatermarkSpec
from docfence.engines.geometry import Matrix, PageGeometry, multiply
from docfence.engines.layout import placements
from docfence.engines.outline_text import Outline, outline_text
from docfence.engines.preflight import OpenedPdf

log = logging.getLogger(__name__)

ARTIFACT_BDC = b"/Artifact <</Type /Pagination /Subtype /Watermark>> BDC"
NAME_PREFIX = "/DfWm"
_PDFA_KEYS = ("pdfaid:part", "pdfaid:conformance", "pdfaid:amd", "pdfaid:rev")


def _fmt(m: Matrix) -> str:
    return " ".join(f"{v:.4f}" for v in m)


class _Builder:
    """Creates the shared objects (text outline form, one geometry form per page geometry, wrappers)."""

    def __init__(self, pdf: pikepdf.Pdf, spec: WatermarkSpec) -> None:
        self.pdf = pdf
        self.spec = spec
        self.outline: Outline = outline_text(spec.text)
        self.text_form = self._form(self.outline.ops, _pad(self.outline.bbox), pikepdf.Dictionary())
        gs = pikepdf.Dictionary(Type=pikepdf.Name.ExtGState, ca=spec.opacity, CA=spec.opacity)
        self.resources = pikepdf.Dictionary(
            ExtGState=pikepdf.Dictionary(DfGS=pdf.make_indirect(gs)),
            XObject=pikepdf.Dictionary(DfText=self.text_form),
        )
        self.forms: dict[tuple[object, ...], pikepdf.Stream] = {}
        self.wrappers: dict[tuple[str, int], tuple[pikepdf.Stream, pikepdf.Stream]] = {}
        self.open_q = pdf.make_stream(b"q\n")

    def _form(self, content: bytes, bbox: tuple[float, ...], resources: pikepdf.Dictionary) -> pikepdf.Stream:
        form = self.pdf.make_stream(content)
        form.Type = pikepdf.Name.XObject
        form.Subtype = pikepdf.Name.Form
        form.BBox = pikepdf.Array(list(bbox))
        form.Resources = resources
        return form

    def geometry_form(self, geo: PageGeometry) -> pikepdf.Stream:
        key = (geo.crop, geo.rotate)
        if key not in self.forms:
            width, height = geo.display_size
            to_user = geo.display_to_user()
            x0, y0, x1, y1 = geo.crop
            r, g, b = self.spec.color
            lines = [f"q {x0:.3f} {y0:.3f} {x1 - x0:.3f} {y1 - y0:.3f} re W n /DfGS gs {r} {g} {b} rg"]
            for m in placements(self.spec, self.outline, width, height):
                lines.append(f"q {_fmt(multiply(m, to_user))} cm /DfText Do Q")
            lines.append("Q\n")
            content = "\n".join(lines).encode("ascii")
            self.forms[key] = self._form(content, geo.crop, self.resources)
        return self.forms[key]

    def wrapper(self, name: str, form: pikepdf.Stream) -> tuple[pikepdf.Stream, pikepdf.Stream]:
        """(before, after) content streams drawing `name` around the page's own content."""
        key = (name, form.objgen[0])
        if key not in self.wrappers:
            draw = b"q " + ARTIFACT_BDC + b" " + name.encode("ascii") + b" Do EMC Q\n"
            if self.spec.layer == "underlay":
                self.wrappers[key] = (self.pdf.make_stream(draw + b"q\n"), self.pdf.make_stream(b"Q\n"))
            else:
                self.wrappers[key] = (self.open_q, self.pdf.make_stream(b"Q\n" + draw))
        return self.wrappers[key]


def _pad(bbox: tuple[float, float, float, float]) -> tuple[float, ...]:
    return (bbox[0] - 10, bbox[1] - 10, bbox[2] + 10, bbox[3] + 10)


def _own_resources(page: pikepdf.Dictionary) -> pikepdf.Dictionary:
    """A /Resources dictionary and /XObject dictionary of the page's own (shallow copies of the page's or
    inherited ones), so adding the mark never touches a dictionary another page shares: every other
    page's resources stay exactly as they were, which the validator proves page by page."""
    res = page.get("/Resources")
    if not isinstance(res, pikepdf.Dictionary):
        parent, res = page.get("/Parent"), None
        for _ in range(64):
            if not isinstance(parent, pikepdf.Dictionary):
                break
            if isinstance(parent.get("/Resources"), pikepdf.Dictionary):
                res = parent.Resources
                break
            parent = parent.get("/Parent")
    # copied as pikepdf dictionaries (shallow, direct), never through Python dicts: a name that is not
    # UTF-8 (`/Fm\xb0`) does not survive the round trip through a Python str (std::bad_cast)
    own = pikepdf.Dictionary(res) if res is not None else pikepdf.Dictionary()
    xobjects = own.get("/XObject")
    own.XObject = pikepdf.Dictionary(xobjects) if isinstance(xobjects, pikepdf.Dictionary) \
        else pikepdf.Dictionary()
    page.Resources = own
    return own


def _free_name(xobjects: pikepdf.Dictionary, form: pikepdf.Stream, index: int) -> str:
    name = f"{NAME_PREFIX}{index}"
    while name in xobjects and xobjects[name].objgen != form.objgen:
        name += "x"
    return name


def stamp_page(builder: _Builder, page: pikepdf.Dictionary, geo: PageGeometry) -> None:
    form = builder.geometry_form(geo)
    xobjects = cast(pikepdf.Dictionary, _own_resources(page).XObject)
    index = list(builder.forms.values()).index(form)
    name = _free_name(xobjects, form, index)
    xobjects[name] = form
    before, after = builder.wrapper(name, form)
    contents = page.get("/Contents")
    if isinstance(contents, pikepdf.Array):
        old = list(contents)
    elif isinstance(contents, pikepdf.Stream):
        old = [contents]
    else:
        old = []
    page.Contents = pikepdf.Array([before, *old, after])


def withdraw_pdfa_claim(pdf: pikepdf.Pdf) -> bool:
    """Remove the PDF/A identification from XMP (we do not re-validate PDF/A). True when one was removed."""
    meta = pdf.Root.get("/Metadata")
    if not isinstance(meta, pikepdf.Stream) or b"pdfaid" not in meta.read_bytes():
        return False
    with pdf.open_metadata(set_pikepdf_as_editor=False, update_docinfo=False) as xmp:
        for key in _PDFA_KEYS:
            if key in xmp:
                del xmp[key]
    return True


def apply_vector(opened: OpenedPdf, spec: WatermarkSpec) -> int:
    """Stamp the selected pages in place; returns how many pages were stamped."""
    builder = _Builder(opened.pdf, spec)
    count = len(opened.pages)
    stamped = 0
    for index, (page, geo) in enumerate(zip(opened.pages, opened.geometry, strict=True)):
        if spec.page_selected(index, count):
            stamp_page(builder, page, geo)
            stamped += 1
    return stamped


_TRAILER_KEYS = frozenset({"/Root", "/Info", "/ID", "/Encrypt", "/Size"})


def save(pdf: pikepdf.Pdf, encrypted: bool) -> bytes:
    """Serialise without linearization, keeping the input's encryption and permissions when it had any.

    Private trailer keys are dropped: nothing a reader uses hangs off them, and they may carry junk."""
    for key in list(pdf.trailer.keys()):
        if key not in _TRAILER_KEYS:
            del pdf.trailer[key]
    out = io.BytesIO()
    try:
        pdf.save(out, encryption=True if encrypted else None, linearize=False, preserve_pdfa=False)
    except pikepdf.PdfError as exc:
        raise MalformedPdf("The PDF could not be written back safely.") from exc
    return out.getvalue()


def watermark_vector(opened: OpenedPdf, policy: JobPolicy) -> bytes:
    """Preflighted PDF in, watermarked PDF bytes out (structure preserved)."""
    if policy.watermark is None:
        raise ConfigError("a watermark job needs a watermark spec")
    stamped = apply_vector(opened, policy.watermark)
    if withdraw_pdfa_claim(opened.pdf):
        opened.notes.append("the PDF/A claim was removed from the XMP metadata (PDF/A is not re-validated)")
    log.debug("vector watermark applied", extra={"pages": len(opened.pages), "stamped": stamped})
    return save(opened.pdf, opened.encrypted)
