"""Preflight: open untrusted PDF bytes and classify them before any work, failing closed with coded errors.

Guarantees: every refusal is a DocumentError subclass with a plain-English message holding no document
content; limits (bytes, pages, page area, objects, decompressed stream size) are checked before rendering.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

import pikepdf

from docfence.core.errors import (
    DocumentError,
    EncryptionForbidsModification,
    FormTreeInvalid,
    InvalidPassword,
    MalformedPdf,
    NoPages,
    NotAPdf,
    OverLimits,
    PageTreeInvalid,
    PasswordRequired,
    ResourceCycle,
    UnsupportedFeature,
)
from docfence.core.policy import JobPolicy, Limits, Mode
from docfence.engines import decode
from docfence.engines.geometry import PageGeometry, page_geometry
from docfence.engines.page_content import (
    CODED,
    as_int,
    check_pages_content,
    coded,
    early_change,
    stream_filters,
)
from docfence.engines.repair import (
    close_open_content,
    complete_without_eof,
    has_header,
    page_list,
    repair_boxes,
    repair_contents,
    structure_notes,
)

_MAX_TREE_DEPTH = 64
_MAX_TRAILING_BYTES = 1024


@dataclass
class OpenedPdf:
    """A PDF that passed preflight: its pages in order and how its encryption must be handled."""

    pdf: pikepdf.Pdf
    pages: list[pikepdf.Dictionary]
    geometry: list[PageGeometry]
    encrypted: bool
    password: str
    notes: list[str] = field(default_factory=list)
    repaired: bool = False  # repairs were made: process the re-serialised file, once readers agree on it


def open_pdf(data: bytes, password: str | None = None) -> pikepdf.Pdf:
    """Open bytes with pikepdf, translating its errors to ours (raises DocumentError subclasses)."""
    try:
        return pikepdf.open(io.BytesIO(data), password=password or "", inherit_page_attributes=False)
    except pikepdf.PasswordError as exc:
        if password:
            raise InvalidPassword() from exc
        raise PasswordRequired() from exc
    except pikepdf.PdfError as exc:
        raise classify_unopenable(data) from exc


def preflight(data: bytes, policy: JobPolicy, password: str | None = None) -> OpenedPdf:
    """Open and classify `data`; raise the most specific DocumentError when it cannot be processed.

    Every failure is a coded DocumentError: a library error on a hostile structure is malformed_pdf,
    running out of memory or stack is over_limits, never a crash of the caller."""
    try:
        return _preflight(data, policy, password)
    except DocumentError:
        raise
    except CODED as exc:
        raise coded(exc) from exc


def _preflight(data: bytes, policy: JobPolicy, password: str | None) -> OpenedPdf:
    limits = policy.limits
    check_bytes(data, limits)
    pdf = open_pdf(data, password)
    encrypted = bool(pdf.is_encrypted)
    if encrypted:
        check_encryption(policy, password)
    if len(pdf.objects) > limits.max_objects:
        raise OverLimits("The PDF has more objects than the configured limit.")
    if "/XFA" in pdf.Root.get("/AcroForm", pikepdf.Dictionary()) and policy.sanitize.active_content == "keep":
        # kept XFA would win over the watermarked pages in XFA readers; strip or refuse are handled by
        # the sanitiser
        raise UnsupportedFeature("The PDF uses an XFA form, which cannot be watermarked faithfully.")
    repairs = structure_notes(data, pdf)  # before qpdf's own page-tree fix-ups add warnings
    pages = collect_pages(pdf, limits.max_pages)
    repairs += repair_boxes(pages)  # before qpdf's page list silently sets missing boxes to Letter
    repairs += repair_contents(pages)
    repairs += close_open_content(pdf, pages)
    if len(pages) != len(pdf.pages):
        raise PageTreeInvalid()
    geometry = [page_geometry(page) for page in pages]
    for geo in geometry:
        if geo.media_area() > limits.max_page_area_pt2:
            raise OverLimits("A page is larger than the configured maximum page area.")
    check_streams(pdf, limits)
    check_form_tree(pdf, limits)
    cycles = check_drawing_graph(pages)
    check_pages_content(pages, limits, stream_data=policy.mode is Mode.VECTOR)
    opened = OpenedPdf(pdf, pages, geometry, encrypted, password or "", repairs, bool(repairs))
    if cycles:  # what the proof leaves out: the drawing past the repeat
        opened.notes.append(f"page(s) {page_list(cycles)}: a form XObject draws itself (a cycle "
                            "readers break); its drawing was not walked past the repeat")
    if pdf.is_linearized:
        opened.notes.append("the input's linearization is not kept (the output is not linearized)")
    if encrypted:
        kept = keep_encryption(pdf)
        opened.notes.append(
            f"the input's encryption and permissions are kept: {kept}; the owner password is unchanged"
            if policy.mode is Mode.VECTOR else
            f"the input's permissions are kept (input: {kept}); the raster output is encrypted anew"
        )
    return opened


_ALGORITHMS = {"aes": "AES", "aesv3": "AES", "rc4": "RC4"}


def keep_encryption(pdf: pikepdf.Pdf) -> str:
    """Make the kept /Encrypt dictionary state the key length the file was read with, and describe it.

    qpdf writes the input's encryption back from its /Encrypt dictionary, taking the key length from
    /Length; a V2-V4 dictionary may omit it (ISO 32000: 40 by default, and an AESV2 crypt filter
    implies 128), so the writer would otherwise refuse ("unsupported key length") or derive another
    key. The algorithm, /O, /U, /P and so the owner password stay as they were. Returns e.g.
    "AES-128 (V4, R4), P=-1052, forbidden: extract, modify_other" (no document content)."""
    info = pdf.encryption
    encrypt = pdf.trailer.get("/Encrypt")
    if isinstance(encrypt, pikepdf.Dictionary) and encrypt.get("/Length") != info.bits:
        encrypt.Length = info.bits
    # V1-V3 have no crypt filters (qpdf reports their method as "none"): RC4 is the only cipher there
    method = info.stream_method.name if info.V >= 4 else "rc4"
    algorithm = _ALGORITHMS.get(method, method)
    allow = pdf.allow
    forbidden = ", ".join(name for name in allow._fields if not getattr(allow, name)) or "nothing"
    kept = f"{algorithm}-{info.bits} (V{info.V}, R{info.R}), P={info.P}, forbidden: {forbidden}"
    if info.V == 4 and method == "rc4":
        # qpdf writes a V4 file's encryption back with AES whatever its crypt filters said (same key)
        kept += "; its RC4 crypt filter is written as AES-128 (AESV2), with the same key"
    return kept


def check_bytes(data: bytes, limits: Limits) -> None:
    if len(data) > limits.max_input_bytes:
        raise OverLimits("The file is larger than the configured input limit.")
    if not has_header(data):
        raise NotAPdf()
    end = data.rfind(b"%%EOF")
    if end < 0 and complete_without_eof(data):
        return  # only the marker is missing or cut: structure_notes records the repair
    if end < 0:
        raise MalformedPdf("The PDF is truncated: it has no end-of-file marker.")
    if len(data[end + 5 :].strip(b"\r\n\t \x00")) > _MAX_TRAILING_BYTES:
        # a truncated incremental update leaves the previous revision's marker behind: refuse, don't guess
        raise MalformedPdf("The PDF is truncated or has unexpected data after its end-of-file marker.")


def check_encryption(policy: JobPolicy, password: str | None) -> None:
    """Owner-password-only files (opened with the empty user password) follow the policy; fail closed.

    A caller who supplies the password may process the file; the output keeps the encryption."""
    if not password and policy.owner_password_policy != "keep":
        raise EncryptionForbidsModification(
            "The PDF is protected by an owner password and the policy refuses such files."
        )


def collect_pages(pdf: pikepdf.Pdf, max_pages: int) -> list[pikepdf.Dictionary]:
    """Walk the page tree ourselves: loops and non-tree nodes are refused, the page limit fails fast.
    The caller compares the count with qpdf's page list after repairing boxes."""
    root = pdf.Root.get("/Pages")
    if not isinstance(root, pikepdf.Dictionary) or "/Kids" not in root:
        raise NoPages()
    pages: list[pikepdf.Dictionary] = []
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[pikepdf.Object, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, pikepdf.Dictionary) or depth > _MAX_TREE_DEPTH:
            raise PageTreeInvalid()
        if node.is_indirect:
            if node.objgen in seen:
                raise PageTreeInvalid()
            seen.add(node.objgen)
        kids = node.get("/Kids")
        if node.get("/Type") == pikepdf.Name.Pages or (kids is not None and "/Contents" not in node):
            if not isinstance(kids, pikepdf.Array):
                raise PageTreeInvalid()
            stack.extend((kid, depth + 1) for kid in reversed(list(kids)))
            continue
        pages.append(node)
        if len(pages) > max_pages:
            raise OverLimits("The PDF has more pages than the configured limit.")
    if not pages:
        raise NoPages()
    return pages


def check_streams(pdf: pikepdf.Pdf, limits: Limits) -> None:
    """PDF bombs fail fast: images by declared size, every other stream whose filter chain could expand
    past the limit by bounded, streamed decoding of the whole chain (any order of Flate, LZW, RunLength,
    ASCIIHex, ASCII85); a declared /DL over the limit is refused without decoding. Every object is
    checked, reachable from a page or not."""
    for obj in pdf.objects:
        if not isinstance(obj, pikepdf.Stream):
            continue
        if obj.get("/Subtype") == pikepdf.Name.Image:
            check_image_size(obj, limits)
        filters = decode.canonical(stream_filters(obj))
        if not filters:
            continue
        if as_int(obj.get("/DL", 0)) > limits.max_stream_bytes:
            raise OverLimits("A stream is larger than the configured decompressed size limit.")
        raw = obj.read_raw_bytes()
        if decode.worst_case_size(len(raw), filters) <= limits.max_stream_bytes:
            continue
        try:
            decode.decoded_size(raw, filters, limits.max_stream_bytes, early_change(obj, len(filters)))
        except decode.DecodeError:
            continue  # undecodable unused streams are tolerated; page content is checked separately


def check_image_size(obj: pikepdf.Stream, limits: Limits) -> None:
    width, height = as_int(obj.get("/Width", 0)), as_int(obj.get("/Height", 0))
    bits = as_int(obj.get("/BitsPerComponent", 8)) or 8
    if width * height * bits * 4 // 8 > limits.max_stream_bytes:
        raise OverLimits("An image is larger than the configured decompressed size limit.")


def bounded_inflate(raw: bytes, times: int, limit: int) -> int:
    """Size of `times` chained Flate layers, raising OverLimits past `limit` (kept for callers/tests)."""
    try:
        return decode.decoded_size(raw, ["/FlateDecode"] * times, limit)
    except decode.DecodeError:
        return 0


def check_form_tree(pdf: pikepdf.Pdf, limits: Limits) -> None:
    """The AcroForm field tree must be a tree: pdfium loops forever loading a page whose form shares one
    field between two parents (or whose fields loop), so both are refused before any renderer sees them."""
    form = pdf.Root.get("/AcroForm")
    fields = form.get("/Fields") if isinstance(form, pikepdf.Dictionary) else None
    if not isinstance(fields, pikepdf.Array):
        return
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[pikepdf.Object, int]] = [(f, 0) for f in fields]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, pikepdf.Dictionary):
            continue
        if depth > _MAX_TREE_DEPTH:
            raise FormTreeInvalid("The PDF's form field tree is nested too deeply to read safely.")
        if node.is_indirect:
            if node.objgen in seen:
                raise FormTreeInvalid()
            seen.add(node.objgen)
            if len(seen) > limits.max_objects:
                raise OverLimits("The PDF has more form fields than the configured object limit.")
        kids = node.get("/Kids")
        if isinstance(kids, pikepdf.Array):
            stack.extend((kid, depth + 1) for kid in kids)


_DRAWN = ("/XObject", "/Pattern", "/Font")


def _drawn_by(node: pikepdf.Object) -> list[pikepdf.Object]:
    """Forms, tiling patterns, Type3 fonts and soft-mask groups that `node`'s resources draw."""
    res = node.get("/Resources") if isinstance(node, pikepdf.Dictionary | pikepdf.Stream) else None
    if not isinstance(res, pikepdf.Dictionary):
        return []
    out: list[pikepdf.Object] = []
    for category in _DRAWN:
        table = res.get(category)
        if isinstance(table, pikepdf.Dictionary):
            out += [v for v in table.values() if isinstance(v, pikepdf.Dictionary | pikepdf.Stream)
                    and "/Resources" in v]
    states = res.get("/ExtGState")
    if isinstance(states, pikepdf.Dictionary):
        for gs in states.values():
            mask = gs.get("/SMask") if isinstance(gs, pikepdf.Dictionary) else None
            if isinstance(mask, pikepdf.Dictionary) and isinstance(mask.get("/G"), pikepdf.Stream):
                out.append(mask.G)
    return out


def _appearances(page: pikepdf.Dictionary) -> list[pikepdf.Object]:
    annots = page.get("/Annots")
    out: list[pikepdf.Object] = []
    for annot in annots if isinstance(annots, pikepdf.Array) else []:
        ap = annot.get("/AP") if isinstance(annot, pikepdf.Dictionary) else None
        normal = ap.get("/N") if isinstance(ap, pikepdf.Dictionary) else None
        if isinstance(normal, pikepdf.Stream):
            out.append(normal)
        elif isinstance(normal, pikepdf.Dictionary):
            out += [v for v in normal.values() if isinstance(v, pikepdf.Stream)]
    return out


def check_drawing_graph(pages: list[pikepdf.Dictionary]) -> list[int]:
    """No pattern, Type3 font or soft mask may draw itself (directly or through others), and drawing may
    nest at most _MAX_TREE_DEPTH levels. Depth-first with the current path and a finished set, so shared
    objects are walked once and the work is bounded by the size of the file.

    A cycle of Form XObjects alone, each drawing the next form of the cycle once, is what readers break
    and draw (poppler and mupdf skip the repeat, pdfium stops at its nesting limit, a linear cost): it is
    not walked past the repeat and the page numbers holding one are returned (1-based) for the report.
    One that draws the cycle twice or more would cost pdfium an exponential render: ResourceCycle."""
    finished: set[tuple[int, int]] = set()
    path: list[pikepdf.Object] = []
    cycles: set[int] = set()
    for number, page in enumerate(pages, start=1):
        stack: list[tuple[pikepdf.Object, int, bool]] = [(s, 0, False) for s in [page, *_appearances(page)]]
        while stack:
            node, depth, leaving = stack.pop()
            key = node.objgen if node.is_indirect else None
            if leaving:
                if key is not None:
                    path.pop()
                    finished.add(key)
                continue
            if key is not None and key in finished:
                continue
            if key is not None and any(on.objgen == key for on in path):
                _tolerated_cycle(path, key)
                cycles.add(number)
                continue
            if depth > _MAX_TREE_DEPTH:
                raise OverLimits("The PDF nests forms, patterns or fonts deeper than the limit.")
            if key is not None:
                path.append(node)
            stack.append((node, depth, True))
            stack.extend((child, depth + 1, False) for child in _drawn_by(node))
    return sorted(cycles)


def _tolerated_cycle(path: list[pikepdf.Object], key: tuple[int, int]) -> None:
    """Raise ResourceCycle unless the cycle closing at `key` (the tail of `path` from it) is made of Form
    XObjects that each draw a form of the cycle exactly once."""
    start = next(i for i, on in enumerate(path) if on.objgen == key)
    cycle = path[start:]
    members = {form.objgen for form in cycle}
    for form in cycle:
        if not isinstance(form, pikepdf.Stream) or form.get("/Subtype") != pikepdf.Name.Form:
            raise ResourceCycle()
        if _draws_of(form, members) != 1:
            raise ResourceCycle()


def _draws_of(form: pikepdf.Stream, members: set[tuple[int, int]]) -> int:
    """How many times `form`'s content draws (Do) an XObject of `members`; an unreadable content counts as
    many (the caller refuses)."""
    res = form.get("/Resources")
    table = res.get("/XObject") if isinstance(res, pikepdf.Dictionary) else None
    if not isinstance(table, pikepdf.Dictionary):
        return 0
    names = {str(name) for name, value in table.items() if value.is_indirect and value.objgen in members}
    try:
        ops = pikepdf.parse_content_stream(form, "Do")
    except (pikepdf.PdfError, ValueError, TypeError, IndexError):
        return len(members) + 1
    return sum(1 for op in ops if isinstance(op, pikepdf.ContentStreamInstruction) and op.operands
               and str(op.operands[0]) in names)


_OBJ_RE = re.compile(rb"(\d+)\s+(\d+)\s+obj\b(.*?)endobj", re.S)
_PAGES_REF_RE = re.compile(rb"/Pages\s+(\d+)\s+\d+\s+R")
_KIDS_RE = re.compile(rb"/Kids\s*\[([^\]]*)\]")
_REF_RE = re.compile(rb"(\d+)\s+\d+\s+R")


def classify_unopenable(data: bytes) -> MalformedPdf | NoPages | PageTreeInvalid:
    """Name what is wrong with a file pikepdf refused, from its raw object syntax (best effort)."""
    objects = {int(m.group(1)): m.group(3) for m in _OBJ_RE.finditer(data[:4_000_000])}
    catalog = next((body for body in objects.values() if b"/Catalog" in body), None)
    ref = _PAGES_REF_RE.search(catalog) if catalog else None
    if catalog is None or ref is None:
        return MalformedPdf("The PDF is damaged beyond safe repair: it has no readable document catalog.")
    node_id = int(ref.group(1))
    if node_id not in objects or b"/Kids" not in objects[node_id]:
        return NoPages()
    seen: set[int] = set()
    stack = [node_id]
    while stack:
        current = stack.pop()
        if current in seen:
            return PageTreeInvalid()
        seen.add(current)
        kids = _KIDS_RE.search(objects.get(current, b""))
        if kids:
            stack.extend(int(k) for k in _REF_RE.findall(kids.group(1)))
    return MalformedPdf()

