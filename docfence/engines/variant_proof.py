"""A report variant's identification (PDF/A-3b, PDF/UA-1): the clean XMP packet docfence writes for it
when the class strips hidden data, and the validator's check that a finished PDF carries the
identification and the properties of its variant that structure shows (not a veraPDF profile run)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast
from xml.sax.saxutils import escape, unescape

import pikepdf

from docfence.engines.checks import Check, check

VARIANT_NAMES = ("pdf/a-3b", "pdf/ua-1")  # engines.report.render.VARIANTS (not imported: WeasyPrint)
PDFA = "pdf/a-3b"
PDFUA = "pdf/ua-1"
_MAX_PACKET = 1 << 16  # a packet of ours is a few hundred bytes (plus its title)
_MAX_NODES = 200_000  # resource dictionaries visited looking for fonts
_FONT_FILES = ("/FontFile", "/FontFile2", "/FontFile3")
_HEAD = ('<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>\n<x:xmpmeta xmlns:x="adobe:ns:meta/">\n'
         '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">\n')
_TAIL = '</rdf:RDF>\n</x:xmpmeta>\n<?xpacket end="r"?>'
_CLAIM = {
    PDFA: '<rdf:Description rdf:about="" xmlns:pdfaid="http://www.aiim.org/pdfa/ns/id/" pdfaid:part="3" '
          'pdfaid:conformance="B"/>\n',
    PDFUA: '<rdf:Description rdf:about="" xmlns:pdfuaid="http://www.aiim.org/pdfua/ns/id/" '
           'pdfuaid:part="1"/>\n',
}
_TITLE_OPEN = ('<rdf:Description rdf:about="" xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>'
               '<rdf:Alt><rdf:li xml:lang="x-default">')
_TITLE_CLOSE = "</rdf:li></rdf:Alt></dc:title></rdf:Description>\n"


@dataclass(frozen=True)
class Identification:
    """What docfence's packet for a variant says: the variant and, for PDF/UA-1 (which requires one),
    the document's title (dc:title, shown by viewers as /DisplayDocTitle asks)."""

    variant: str
    title: str | None = None


def packet(ident: Identification) -> bytes:
    """The clean XMP packet of `ident`: its identification fields, the title for PDF/UA-1, nothing else."""
    body = _HEAD + _CLAIM[ident.variant]
    if ident.variant == PDFUA and ident.title:
        body += _TITLE_OPEN + escape(_xml_chars(ident.title)) + _TITLE_CLOSE
    return (body + _TAIL).encode("utf-8")


def _xml_chars(text: str) -> str:
    """`text` without the characters XML 1.0 cannot carry (C0 controls but tab and line ends)."""
    return "".join(c for c in text if c >= " " or c in "\t\n\r")


def docfence_packet(pdf: pikepdf.Pdf) -> Identification | None:
    """The identification the catalog's /Metadata holds when it is exactly a packet docfence writes (byte
    for byte, so it can hold nothing else); None for any other metadata or none. Parses no XML."""
    meta = pdf.Root.get("/Metadata")
    if not isinstance(meta, pikepdf.Stream) or "/Filter" in meta:
        return None  # ours is written unfiltered
    length = meta.get("/Length")
    if not isinstance(length, int) or length > _MAX_PACKET:
        return None
    try:
        text = meta.read_raw_bytes().decode("utf-8")
    except (pikepdf.PdfError, UnicodeDecodeError):
        return None
    for variant in VARIANT_NAMES:
        prefix = _HEAD + _CLAIM[variant]
        if not text.startswith(prefix):
            continue
        rest = text[len(prefix):-len(_TAIL)] if text.endswith(_TAIL) else None
        title = None
        if rest and variant == PDFUA and rest.startswith(_TITLE_OPEN) and rest.endswith(_TITLE_CLOSE):
            title = unescape(rest[len(_TITLE_OPEN):-len(_TITLE_CLOSE)])
        ident = Identification(variant, title)
        return ident if packet(ident) == text.encode("utf-8") else None
    return None


def claimed(pdf: pikepdf.Pdf) -> tuple[frozenset[str], str | None]:
    """(variants the catalog's XMP claims, its dc:title). For docfence's own render or output: parses
    the XMP with pikepdf's reader."""
    if not isinstance(pdf.Root.get("/Metadata"), pikepdf.Stream):
        return frozenset(), None
    try:
        xmp = pdf.open_metadata(set_pikepdf_as_editor=False, update_docinfo=False)  # read, never written
        fields = {k: xmp.get(k) for k in ("pdfaid:part", "pdfaid:conformance", "pdfuaid:part", "dc:title")}
    except (ValueError, SyntaxError, pikepdf.PdfError):  # lxml's XMLSyntaxError is a SyntaxError
        return frozenset(), None  # XMP pikepdf cannot read claims nothing
    variants = set()
    if str(fields["pdfaid:part"]) == "3" and str(fields["pdfaid:conformance"]) == "B":
        variants.add(PDFA)
    if str(fields["pdfuaid:part"]) == "1":
        variants.add(PDFUA)
    title = fields["dc:title"]
    return frozenset(variants), str(title) if title else None


def identification_of(pdf: pikepdf.Pdf, variant: str) -> Identification | None:
    """The identification to keep for a report rendered as `variant`: what the renderer's XMP claims
    (None when it does not claim `variant`; docfence never claims what its renderer did not)."""
    variants, title = claimed(pdf)
    if variant not in variants:
        return None
    title = _xml_chars(title) if title and variant == PDFUA else None
    return Identification(variant, title or None)


def write_identification(pdf: pikepdf.Pdf, ident: Identification) -> None:
    """Make `ident`'s packet the catalog's /Metadata; a PDF/UA-1 title also becomes the only /Info
    entry (poppler-based viewers show /Info's title where /DisplayDocTitle asks for one)."""
    stream = pdf.make_stream(packet(ident))
    stream.Type, stream.Subtype = pikepdf.Name.Metadata, pikepdf.Name.XML
    pdf.Root.Metadata = stream
    if ident.title:
        pdf.trailer.Info = pdf.make_indirect(pikepdf.Dictionary(Title=pikepdf.String(ident.title)))


def info_is_title_of(pdf: pikepdf.Pdf, ident: Identification) -> bool:
    """The trailer's /Info holds nothing but the title docfence's packet carries."""
    info = pdf.trailer.get("/Info")
    return (isinstance(info, pikepdf.Dictionary) and set(info.keys()) == {"/Title"}
            and ident.title is not None and str(info.Title) == ident.title)


def variant_check(pdf: pikepdf.Pdf, variant: str) -> Check:
    """The validator's check of a report of `variant`: XMP identification, then the catalog entries and
    font programs the variant requires. Failures name the missing property, never document text."""
    variants, title = claimed(pdf)
    failures = [] if variant in variants else [_missing_claim(pdf, variant)]
    root = cast(pikepdf.Dictionary, pdf.Root)
    if variant == PDFA:
        if pdf.is_encrypted:
            failures.append("the file is encrypted (PDF/A forbids encryption)")
        if not _has_pdfa_output_intent(root.get("/OutputIntents")):
            failures.append("catalog: no /OutputIntents entry of /S /GTS_PDFA1 with a /DestOutputProfile")
    else:
        failures += _ua_failures(root, title)
    failures += unembedded_fonts(pdf)
    return check("variant", failures, variant=variant,
                 method="XMP identification, catalog entries and font descriptors (structure; not a "
                        "full PDF/A or PDF/UA profile check)")


def _missing_claim(pdf: pikepdf.Pdf, variant: str) -> str:
    if not isinstance(pdf.Root.get("/Metadata"), pikepdf.Stream):
        return "catalog: no /Metadata (XMP) stream, so no variant identification"
    fields = "pdfaid:part=3 pdfaid:conformance=B" if variant == PDFA else "pdfuaid:part=1"
    return f"XMP: no {variant} identification ({fields})"


def _has_pdfa_output_intent(intents: pikepdf.Object | None) -> bool:
    if not isinstance(intents, pikepdf.Array):
        return False
    return any(isinstance(i, pikepdf.Dictionary) and i.get("/S") == pikepdf.Name("/GTS_PDFA1")
               and isinstance(i.get("/DestOutputProfile"), pikepdf.Stream) for i in intents)


def _ua_failures(root: pikepdf.Dictionary, title: str | None) -> list[str]:
    failures = []
    if not title:
        failures.append("XMP: no dc:title (PDF/UA-1 requires the document's title)")
    mark_info = root.get("/MarkInfo")
    if not (isinstance(mark_info, pikepdf.Dictionary) and _true(mark_info.get("/Marked"))):
        failures.append("catalog: /MarkInfo /Marked is not true (the document is not tagged)")
    if not isinstance(root.get("/StructTreeRoot"), pikepdf.Dictionary):
        failures.append("catalog: no /StructTreeRoot (no tagged structure)")
    lang = root.get("/Lang")
    if not isinstance(lang, pikepdf.String) or not str(lang):
        failures.append("catalog: no /Lang (the document's natural language)")
    prefs = root.get("/ViewerPreferences")
    if not (isinstance(prefs, pikepdf.Dictionary) and _true(prefs.get("/DisplayDocTitle"))):
        failures.append("catalog: /ViewerPreferences /DisplayDocTitle is not true")
    return failures


def _true(value: object) -> bool:
    return isinstance(value, bool) and value  # pikepdf gives PDF booleans as Python's


def unembedded_fonts(pdf: pikepdf.Pdf) -> list[str]:
    """One failure per page font (forms and Type 3 resources included) without its font program."""
    failures = []
    for number, name, font in _page_fonts(pdf):
        if not _embedded(font):
            failures.append(f"page {number}: font {name} (object {font.objgen[0]}) is not embedded")
    return failures


def _embedded(font: pikepdf.Dictionary) -> bool:
    subtype = font.get("/Subtype")
    if subtype == pikepdf.Name.Type3:
        return True  # its glyphs are content streams of the file
    if subtype == pikepdf.Name.Type0:
        kids = font.get("/DescendantFonts")
        descendant = kids[0] if isinstance(kids, pikepdf.Array) and len(kids) else None
        if not isinstance(descendant, pikepdf.Dictionary):
            return False
        font = descendant
    descriptor = font.get("/FontDescriptor")
    return isinstance(descriptor, pikepdf.Dictionary) and any(
        isinstance(descriptor.get(k), pikepdf.Stream) for k in _FONT_FILES)


def _page_fonts(pdf: pikepdf.Pdf) -> Iterator[tuple[int, str, pikepdf.Dictionary]]:
    """(page number, resource name, font) of every font each page's content can use, through form
    XObjects, patterns, Type 3 fonts and annotation appearances; each resource dictionary and font once."""
    seen: set[tuple[int, int]] = set()
    steps = 0
    for number, page in enumerate(pdf.pages, start=1):
        stack = [_inherited_resources(page.obj), *_appearance_resources(page.obj)]
        while stack and steps < _MAX_NODES:
            steps += 1
            res = stack.pop()
            if not isinstance(res, pikepdf.Dictionary) or not _first_visit(res, seen):
                continue
            fonts = res.get("/Font")
            for name, font in fonts.items() if isinstance(fonts, pikepdf.Dictionary) else ():
                if isinstance(font, pikepdf.Dictionary) and _first_visit(font, seen):
                    yield number, str(name), font
                    stack.append(font.get("/Resources"))  # a Type 3 font's glyphs may use fonts
            for group in ("/XObject", "/Pattern"):
                entries = res.get(group)
                if isinstance(entries, pikepdf.Dictionary):
                    stack.extend(v.get("/Resources") for v in entries.values()
                                 if isinstance(v, pikepdf.Dictionary | pikepdf.Stream))


def _first_visit(obj: pikepdf.Object, seen: set[tuple[int, int]]) -> bool:
    if not obj.is_indirect:
        return True
    if obj.objgen in seen:
        return False
    seen.add(obj.objgen)
    return True


def _inherited_resources(page: pikepdf.Dictionary) -> pikepdf.Object | None:
    node: pikepdf.Object | None = page
    for _ in range(64):
        if not isinstance(node, pikepdf.Dictionary):
            return None
        if "/Resources" in node:
            return node.Resources
        node = node.get("/Parent")
    return None


def _appearance_resources(page: pikepdf.Dictionary) -> Iterator[pikepdf.Object | None]:
    annots = page.get("/Annots")
    for annot in annots if isinstance(annots, pikepdf.Array) else ():
        ap = annot.get("/AP") if isinstance(annot, pikepdf.Dictionary) else None
        for state in ap.values() if isinstance(ap, pikepdf.Dictionary) else ():
            if isinstance(state, pikepdf.Stream):
                yield state.get("/Resources")
            elif isinstance(state, pikepdf.Dictionary):
                yield from (s.get("/Resources") for s in state.values() if isinstance(s, pikepdf.Stream))


def prove_variant(output: bytes, variant: str) -> Check:
    """`variant_check` of the finished bytes (a file that does not open fails it)."""
    try:
        pdf = pikepdf.open(io.BytesIO(output))
    except pikepdf.PdfError:
        return check("variant", ["the output cannot be opened"], variant=variant)
    with pdf:
        return variant_check(pdf, variant)


__all__ = ["VARIANT_NAMES", "Identification", "docfence_packet", "identification_of", "info_is_title_of",
           "packet", "prove_variant", "unembedded_fonts", "variant_check", "write_identification"]
