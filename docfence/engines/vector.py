"""Vector (structure-preserving) watermarking: each mark one shared Form XObject per page geometry (a mark
whose text holds `{page}` one per page), drawn in a q/Q-isolated overlay or underlay marked as a
pagination artifact. Text, fonts, links, annotations, forms,
outlines, tags and page boxes are untouched; encryption is kept; a PDF/A claim is withdrawn, but for a report
docfence rendered as PDF/A-3b, whose claim the variant proof (engines/variant_proof.py) checks instead."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from typing import cast

import pikepdf

from docfence.core.errors import ConfigError, MalformedPdf
from docfence.core.policy import JobPolicy, WatermarkSpec
from docfence.engines.geometry import Matrix, PageGeometry, multiply
from docfence.engines.mark_art import SLOT, Art, ArtShop, fill_slots, page_digits
from docfence.engines.mark_placement import placements
from docfence.engines.marks import MarkSet, PageMark
from docfence.engines.preflight import OpenedPdf
from docfence.engines.variant_proof import PDFA

log = logging.getLogger(__name__)

ARTIFACT_BDC = b"/Artifact <</Type /Pagination /Subtype /Watermark>> BDC"
NAME_PREFIX = "/DfWm"
_PDFA_KEYS = ("pdfaid:part", "pdfaid:conformance", "pdfaid:amd", "pdfaid:rev")


def _fmt(m: Matrix) -> str:
    return " ".join(f"{v:.4f}" for v in m)


@dataclass(frozen=True)
class FormParts:
    content: bytes
    state: pikepdf.Object  # the ExtGState of the mark's opacity
    xobjects: tuple[tuple[str, pikepdf.Stream], ...]  # name -> shared form (text runs, digits, image)
    shared: pikepdf.Object | None = None  # the indirect resources every page's form of this mark uses


def _resources(state: pikepdf.Object, named: tuple[tuple[str, pikepdf.Stream], ...]) -> pikepdf.Dictionary:
    xobjects = pikepdf.Dictionary(dict(named))
    return pikepdf.Dictionary(ExtGState=pikepdf.Dictionary(DfGS=state), XObject=xobjects)


_Template = tuple[tuple[str, ...], pikepdf.Object, "pikepdf.Object | None"]  # content parts, state, resources


class _Builder:
    """Creates the shared objects: each mark's art once (mark_art), one form per mark and page geometry
    (per page text for marks with `{page}`), and one pair of wrapper streams per combination of marks."""

    def __init__(self, pdf: pikepdf.Pdf) -> None:
        self.pdf = pdf
        self.shop = ArtShop(pdf)
        self.states: dict[float, pikepdf.Object] = {}
        self.forms: dict[tuple[object, ...], pikepdf.Stream] = {}
        self.resources: dict[tuple[str, ...], pikepdf.Object] = {}
        # a `{page}` mark's content per layout: split at its digit slots, with its state and resources
        self.templates: dict[tuple[object, ...], _Template] = {}
        self.wrappers: dict[tuple[tuple[str, str], ...], tuple[pikepdf.Stream, pikepdf.Stream]] = {}
        self.open_q = pdf.make_stream(b"q\n")

    def _state(self, opacity: float) -> pikepdf.Object:
        if opacity not in self.states:
            gs = pikepdf.Dictionary(Type=pikepdf.Name.ExtGState, ca=opacity, CA=opacity)
            self.states[opacity] = self.pdf.make_indirect(gs)
        return self.states[opacity]

    def form_parts(self, mark: PageMark, geo: PageGeometry) -> FormParts:
        """What the mark's form for this page geometry holds, without making it: its content, the
        ExtGState of its opacity and the (shared) XObjects it draws, by name. A `{page}` mark's content is
        laid out once per number of digits and geometry and its page's digits put in the slots."""
        art = self.shop.art(mark)
        if not art.slots:
            content, state, shared = self._layout(mark, geo, art)
            return FormParts(content.encode("ascii"), state, art.named, shared)
        key = (id(art), mark.index, mark.spec, geo.crop, geo.rotate)  # `art` lives as long as the shop
        template = self.templates.get(key)
        if template is None:
            content, state, shared = self._layout(mark, geo, art)
            template = self.templates[key] = (tuple(content.split(SLOT)), state, shared)
        parts, state, shared = template
        digits = page_digits(mark)
        filled = fill_slots(parts, digits * ((len(parts) - 1) // art.slots))
        return FormParts(filled.encode("ascii"), state, art.named, shared)

    def _layout(self, mark: PageMark, geo: PageGeometry, art: Art) -> tuple[str, pikepdf.Object,
                                                                            pikepdf.Object | None]:
        width, height = geo.display_size
        to_user = geo.display_to_user()
        x0, y0, x1, y1 = geo.crop
        r, g, b = mark.spec.color
        lines = [f"q {x0:.3f} {y0:.3f} {x1 - x0:.3f} {y1 - y0:.3f} re W n /DfGS gs {r} {g} {b} rg"]
        for m in placements(mark.spec, art.outline, width, height):
            lines.append(f"q {_fmt(multiply(m, to_user))} cm {art.draw} Q")
        lines.append("Q\n")
        state = self._state(mark.spec.opacity)
        shared = self._shared_resources(art.key, state, art.named) if art.key else None
        return "\n".join(lines), state, shared

    def _shared_resources(self, key: tuple[str, ...], state: pikepdf.Object,
                          named: tuple[tuple[str, pikepdf.Stream], ...]) -> pikepdf.Object:
        """One indirect resource dictionary for all the per-page forms of a `{page}` mark."""
        full = (*key, str(state.objgen))
        if full not in self.resources:
            self.resources[full] = self.pdf.make_indirect(_resources(state, named))
        return self.resources[full]

    def geometry_form(self, mark: PageMark, geo: PageGeometry) -> pikepdf.Stream:
        """The mark laid out for this page geometry, clipped to the visible box (a `{page}` mark's: for
        this page, made anew, as no other page has its number)."""
        if mark.per_page:
            return self._new_form(mark, geo)
        key = (mark.index, mark.spec, mark.text, geo.crop, geo.rotate)
        if key not in self.forms:
            self.forms[key] = self._new_form(mark, geo)
        return self.forms[key]

    def _new_form(self, mark: PageMark, geo: PageGeometry) -> pikepdf.Stream:
        parts = self.form_parts(mark, geo)
        resources = parts.shared if parts.shared is not None else _resources(parts.state, parts.xobjects)
        return self.shop.form(parts.content, geo.crop, resources)

    def wrapper(self, drawn: tuple[tuple[str, str], ...]) -> tuple[pikepdf.Stream, pikepdf.Stream]:
        """(before, after) content streams drawing the (name, layer) marks around the page's content."""
        if drawn not in self.wrappers:
            first, last = wrapper_bytes(drawn)
            before = self.open_q if first == b"q\n" else self.pdf.make_stream(first)
            self.wrappers[drawn] = (before, self.pdf.make_stream(last))
        return self.wrappers[drawn]


def draw_bytes(name: str) -> bytes:
    return b"q " + ARTIFACT_BDC + b" " + name.encode("ascii") + b" Do EMC Q\n"


def wrapper_bytes(drawn: tuple[tuple[str, str], ...]) -> tuple[bytes, bytes]:
    """(first, last) content stream of a page drawing `drawn` ((name, layer) in order): underlays
    before the page's own content, overlays after it, the content itself inside q/Q."""
    under = b"".join(draw_bytes(name) for name, layer in drawn if layer == "underlay")
    over = b"".join(draw_bytes(name) for name, layer in drawn if layer != "underlay")
    return under + b"q\n", b"Q\n" + over


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
    own = pikepdf.Dictionary(res) if res is not None else pikepdf.Dictionary()  # type: ignore[arg-type]
    xobjects = own.get("/XObject")
    # pikepdf's hints accept only Python mappings; a pikepdf.Dictionary is copied shallowly as one
    own.XObject = (pikepdf.Dictionary(xobjects) if isinstance(xobjects, pikepdf.Dictionary)  # type: ignore[arg-type]
                   else pikepdf.Dictionary())
    page.Resources = own
    return own


def _free_name(xobjects: pikepdf.Dictionary, form: pikepdf.Stream, index: int) -> str:
    """`/DfWm<index>`, lengthened with "x" until no other object of the page's uses the name."""
    name = f"{NAME_PREFIX}{index}"
    while name in xobjects and xobjects[name].objgen != form.objgen:
        name += "x"
    return name


def stamp_page(builder: _Builder, page: pikepdf.Dictionary, geo: PageGeometry,
               marks: tuple[PageMark, ...]) -> None:
    """Draw `marks` (this page's, in order) on `page`, each as a fresh-named Form XObject."""
    xobjects = cast(pikepdf.Dictionary, _own_resources(page).XObject)
    drawn = []
    for mark in marks:
        form = builder.geometry_form(mark, geo)
        name = _free_name(xobjects, form, mark.index)
        xobjects[name] = form
        drawn.append((name, mark.spec.layer))
    before, after = builder.wrapper(tuple(drawn))
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


def apply_vector(opened: OpenedPdf, marks: MarkSet | WatermarkSpec) -> int:
    """Stamp every page its marks, in place; returns how many pages got at least one."""
    marks = MarkSet.coerce(marks)
    builder = _Builder(opened.pdf)
    count = len(opened.pages)
    stamped = 0
    for index, (page, geo) in enumerate(zip(opened.pages, opened.geometry, strict=True)):
        drawn = marks.on_page(index, count)
        if drawn:
            stamp_page(builder, page, geo, drawn)
            stamped += 1
    return stamped


_TRAILER_KEYS = frozenset({"/Root", "/Info", "/ID", "/Encrypt", "/Size"})


def save(pdf: pikepdf.Pdf, encrypted: bool) -> bytes:
    """Serialise without linearization, keeping the input's encryption and permissions when it had any.

    Private trailer keys are dropped: nothing a reader uses hangs off them, and they may carry junk.
    The same input gives the same bytes: the /ID qpdf writes comes from the content, not the clock (an
    encrypted file keeps its own /ID, which its key depends on). XMP metadata is written as it is
    (pikepdf would otherwise re-serialise every packet, docfence's identification packet included)."""
    for key in list(pdf.trailer.keys()):
        if key not in _TRAILER_KEYS:
            del pdf.trailer[key]
    out = io.BytesIO()
    try:
        pdf.save(out, encryption=True if encrypted else None, linearize=False, preserve_pdfa=False,
                 deterministic_id=not encrypted, fix_metadata_version=False)
    except pikepdf.PdfError as exc:
        raise MalformedPdf("The PDF could not be written back safely.") from exc
    return out.getvalue()


def watermark_vector(opened: OpenedPdf, policy: JobPolicy, *, variant: str | None = None,
                     marks: MarkSet | None = None) -> bytes:
    """Preflighted PDF in, watermarked PDF bytes out (structure preserved). `variant`: the report variant
    docfence rendered the input as; a "pdf/a-3b" report keeps its PDF/A claim. `marks`: the policy's
    marks fitted to the pages (mark_obscure.fit_marks); default: as configured."""
    if policy.watermark is None:
        raise ConfigError("a watermark job needs a watermark spec")
    stamped = apply_vector(opened, MarkSet.of(policy) if marks is None else marks)
    if variant != PDFA and withdraw_pdfa_claim(opened.pdf):
        opened.notes.append("the PDF/A claim was removed from the XMP metadata (PDF/A is not re-validated)")
    log.debug("vector watermark applied", extra={"pages": len(opened.pages), "stamped": stamped})
    return save(opened.pdf, opened.encrypted)
