"""The one sanitiser: finds active content and hidden data in a preflighted PDF and keeps, strips or refuses
each kind per the document class (core.policy.SanitizePolicy); drops catalog entries nothing reads.

A report docfence rendered as a declared variant (PDF/A-3b, PDF/UA-1) keeps its identification: when the
renderer's XMP is stripped, the catalog gets docfence's clean packet of the identification fields alone
(engines/variant_proof.py), and nothing else of the hidden data survives.

Guarantees: visible page content is never touched (content streams, resources, appearance streams); link
annotations stay, with their URI unless `link_uris` is strip, or unless its scheme is active (javascript:,
vbscript:, data:, file: are active content wherever they sit, engines/sanitize_kinds.py); file-attachment
and multimedia annotations are removed when their kind is stripped. Raises ActiveContentRefused, naming the
kinds, when the class refuses what was found. Every walk is bounded (visited sets and depth limits), so a
looping structure cannot hang it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pikepdf

from docfence.core.errors import ActiveContentRefused, MalformedPdf
from docfence.core.policy import SanitizePolicy
from docfence.engines.pdf_objects import ARRAY, is_container
from docfence.engines.sanitize_kinds import (
    CATALOG_KEYS,
    HIDDEN_KEYS,
    MEDIA_ANNOTATIONS,
    Finding,
    action_kinds,
    base_uri_kind,
    decision,
)
from docfence.engines.variant_proof import Identification, write_identification

_MAX_EXAMPLES = 20
_MAX_OUTLINE_ITEMS = 100_000


@dataclass
class SanitizeResult:
    """What was found and what was removed; `annotations_changed` says page annotations were edited, so
    the validator must compare the output with the sanitised input rather than the original bytes."""

    policy: SanitizePolicy
    found: list[Finding] = field(default_factory=list)
    stripped: list[Finding] = field(default_factory=list)
    annotations_changed: bool = False
    repairs: list[str] = field(default_factory=list)
    identification: str | None = None  # the variant whose clean identification packet was written

    def notes(self) -> list[str]:
        kinds = sorted({f.kind for f in self.stripped})
        removed = [f"sanitised: {len(self.stripped)} item(s) removed ({', '.join(kinds)})"] if kinds else []
        if self.identification:
            removed.append(f"sanitised: the {self.identification} identification was written anew as a "
                           "clean XMP packet (identification fields only)")
        return [*self.repairs, *removed]

    def report(self) -> dict[str, Any]:
        """The validation report's entry: counts per kind and the first locations (no document content)."""
        return {
            "policy": {"active_content": self.policy.active_content, "hidden_data": self.policy.hidden_data,
                       "link_uris": self.policy.link_uris},
            "found": dict(sorted(Counter(f.kind for f in self.found).items())),
            "stripped": dict(sorted(Counter(f.kind for f in self.stripped).items())),
            "stripped_at": [f"{f.kind}: {f.where}" for f in self.stripped[:_MAX_EXAMPLES]],
            **({"identification": self.identification} if self.identification else {}),
        }


class _Sanitizer:
    def __init__(self, pdf: pikepdf.Pdf, policy: SanitizePolicy) -> None:
        self.pdf = pdf
        self.result = SanitizeResult(policy)

    def item(self, kind: str, where: str, remove: Callable[[], None]) -> bool:
        """Record one finding; strip it when the policy says so. True when it was stripped."""
        finding = Finding(kind, where)
        self.result.found.append(finding)
        if decision(kind, self.result.policy) != "strip":
            return False
        remove()
        self.result.stripped.append(finding)
        return True

    def key(self, holder: pikepdf.Object | None, key: str, kind: str, where: str) -> bool:
        if not isinstance(holder, pikepdf.Dictionary | pikepdf.Stream) or key not in holder:
            return False
        return self.item(kind, f"{where} {key}", lambda: holder.__delitem__(key))

    def action(self, holder: pikepdf.Object, key: str, where: str, *, link: bool = False) -> bool:
        """An action under `holder[key]`: removed whole when any action in its chain is stripped."""
        action = holder.get(key)
        if action is None:
            return False
        kinds = action_kinds(action)
        if link and kinds == ["uri_action"] and "/Next" not in action:
            kinds = ["link_uri"]  # the plain URI of a visible link
        removed = False
        for kind in dict.fromkeys(kinds):
            finding = Finding(kind, f"{where} {key}")
            self.result.found.append(finding)
            if not removed and decision(kind, self.result.policy) == "strip":
                del holder[key]
                removed = True
            if removed:
                self.result.stripped.append(finding)
        return removed

    def additional_actions(self, holder: pikepdf.Object, where: str) -> bool:
        aa = holder.get("/AA") if isinstance(holder, pikepdf.Dictionary | pikepdf.Stream) else None
        if not isinstance(aa, pikepdf.Dictionary):
            return False
        changed = False
        for trigger in sorted(aa.keys()):  # pikepdf gives a set: sorted, so reports repeat
            changed |= self.action(aa, trigger, f"{where} /AA")
        if changed and not aa.keys():
            del holder["/AA"]
        return changed


def sanitize(pdf: pikepdf.Pdf, pages: list[pikepdf.Dictionary], policy: SanitizePolicy, *,
             identification: Identification | None = None) -> SanitizeResult:
    """Sanitise `pdf` in place (pages as preflight collected them); raises ActiveContentRefused, and
    MalformedPdf when the library cannot read a structure it walks (never an uncoded exception).
    `identification`: the variant a report was rendered as, as its renderer claimed it; when the
    catalog's XMP is stripped, docfence's clean packet of it takes its place."""
    s = _Sanitizer(pdf, policy)
    try:
        _document(s)
        for number, page in enumerate(pages, start=1):
            _page(s, page, number)
        _everywhere(s)
        if identification is not None and "/Metadata" not in pdf.Root:
            write_identification(pdf, identification)  # after the walk, which would strip it again
            s.result.identification = identification.variant
    except (pikepdf.PdfError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            RecursionError) as exc:
        raise MalformedPdf("The PDF is damaged beyond safe repair (its structure cannot be read).") from exc
    refused = sorted({f.kind for f in s.result.found if decision(f.kind, policy) == "refuse"})
    if refused:
        raise ActiveContentRefused(
            f"The document holds active content its class refuses ({', '.join(refused)})."
        )
    return s.result


def _document(s: _Sanitizer) -> None:
    root, trailer = s.pdf.Root, s.pdf.trailer
    info = trailer.get("/Info")
    if isinstance(info, pikepdf.Dictionary) and info.keys():
        s.key(trailer, "/Info", "info_metadata", "trailer")
    s.key(root, "/Metadata", "xmp_metadata", "catalog")
    s.key(root, "/PieceInfo", "piece_info", "catalog")
    if isinstance(root.get("/OpenAction"), pikepdf.Dictionary):
        s.action(root, "/OpenAction", "catalog")
    s.additional_actions(root, "catalog")
    base = base_uri_kind(root)
    if base is not None:
        s.key(root.URI, "/Base", base, "catalog /URI")
    names = root.get("/Names")
    if isinstance(names, pikepdf.Dictionary):
        s.key(names, "/JavaScript", "javascript", "catalog /Names")
        s.key(names, "/EmbeddedFiles", "embedded_file", "catalog /Names")
    s.key(root, "/Collection", "embedded_file", "catalog")
    s.key(root, "/AF", "embedded_file", "catalog")
    form = root.get("/AcroForm")
    if s.key(form, "/XFA", "xfa", "catalog /AcroForm") and "/NeedsRendering" in root:
        del root["/NeedsRendering"]
    if isinstance(form, pikepdf.Dictionary):
        _fields(s, form)
    _outlines(s, root.get("/Outlines"))
    for key in sorted(str(k) for k in root.keys() if k not in CATALOG_KEYS):  # noqa: SIM118
        s.key(root, key, "private_data", "catalog")


def _everywhere(s: _Sanitizer) -> None:
    """XMP, thumbnails, private data and associated/embedded files on every other object (images, forms,
    fonts, structure elements and namespaces), including dictionaries nested directly inside them.
    Each node is asked only for keys it has (pikepdf looks an absent key up as dearly as a present one)."""
    for obj in s.pdf.objects:
        if not is_container(obj):
            continue
        stack: list[pikepdf.Object] = [obj]
        where = f"object {obj.objgen[0]}"
        while stack:
            node = stack.pop()
            if node._type_code is ARRAY:
                stack.extend(v for v in node if _direct_container(v))
                continue
            keys = frozenset(node.keys())
            for key, kind, types in HIDDEN_KEYS:
                if key in keys and isinstance(node[key], types):
                    s.key(node, key, kind, where)
            if "/AF" in keys and isinstance(node["/AF"], pikepdf.Array | pikepdf.Dictionary):
                s.key(node, "/AF", "embedded_file", where)
            if "/EF" in keys and isinstance(node["/EF"], pikepdf.Dictionary):
                s.key(node, "/EF", "embedded_file", where)
            stack.extend(v for v in node.values() if _direct_container(v))


def _direct_container(value: pikepdf.Object) -> bool:
    return is_container(value, streams=False) and not value.is_indirect  # a stream is always indirect


def _fields(s: _Sanitizer, form: pikepdf.Dictionary) -> None:
    """Field-level additional actions (keystroke, format, calculate scripts); preflight has already
    refused looping or shared field trees, the visited set only keeps this walk bounded regardless."""
    stack = list(form.get("/Fields", pikepdf.Array()))
    seen: set[tuple[int, int]] = set()
    while stack:
        node = stack.pop()
        if not isinstance(node, pikepdf.Dictionary) or (node.is_indirect and node.objgen in seen):
            continue
        if node.is_indirect:
            seen.add(node.objgen)
        s.additional_actions(node, "form field")
        kids = node.get("/Kids")
        if isinstance(kids, pikepdf.Array) and len(seen) < 1_000_000:
            stack.extend(kids)


def _outlines(s: _Sanitizer, outlines: pikepdf.Object | None) -> None:
    """Outline actions; a link back to an item already seen (a loop, or an item under two parents) is
    cut, so no reader walks the outline forever. Bounded by _MAX_OUTLINE_ITEMS."""
    if not isinstance(outlines, pikepdf.Dictionary):
        return
    stack: list[tuple[pikepdf.Dictionary, str]] = [(outlines, "/First")]
    seen: set[tuple[int, int]] = set()
    cut = 0
    while stack and len(seen) < _MAX_OUTLINE_ITEMS:
        holder, key = stack.pop()
        item = holder.get(key)
        if not isinstance(item, pikepdf.Dictionary):
            continue
        if item.is_indirect and item.objgen in seen:
            del holder[key]
            cut += 1
            continue
        if item.is_indirect:
            seen.add(item.objgen)
        s.action(item, "/A", "outline item")
        stack.extend([(item, "/Next"), (item, "/First")])
    if cut:
        s.result.repairs.append(f"repaired: {cut} outline link(s) that looped back were cut")


def _page(s: _Sanitizer, page: pikepdf.Dictionary, number: int) -> None:
    where = f"page {number}"
    s.additional_actions(page, where)
    s.key(page, "/Thumb", "thumbnail", where)
    s.key(page, "/PieceInfo", "piece_info", where)
    s.key(page, "/Metadata", "xmp_metadata", where)
    annots = page.get("/Annots")
    if not isinstance(annots, pikepdf.Array):
        return
    kept = []
    changed = False
    for index, annot in enumerate(annots, start=1):
        at = f"{where} annotation {index}"
        if not _annotation(s, annot, at):
            changed = True
            continue
        kept.append(annot)
        if isinstance(annot, pikepdf.Dictionary):
            link = annot.get("/Subtype") == pikepdf.Name.Link
            changed |= s.action(annot, "/A", at, link=link)
            # /PA: the URI action Web Capture saved when it turned the link into a go-to; judged as the
            # link's own URI (kept or stripped with link URIs; an active scheme always stripped)
            changed |= s.action(annot, "/PA", at, link=link)
            changed |= s.additional_actions(annot, at)
    if changed:
        page.Annots = pikepdf.Array(kept)
        s.result.annotations_changed = True


def _annotation(s: _Sanitizer, annot: pikepdf.Object, where: str) -> bool:
    """False when the whole annotation is removed (file attachments, multimedia players)."""
    if not isinstance(annot, pikepdf.Dictionary):
        return True
    subtype = str(annot.get("/Subtype", ""))
    if subtype == "/FileAttachment":
        return not s.item("embedded_file", where, lambda: _empty(annot))
    if subtype in MEDIA_ANNOTATIONS:
        return not s.item("rich_media", where, lambda: _empty(annot))
    return True


_PAYLOAD_KEYS = ("/FS", "/A", "/AA", "/RichMediaContent", "/RichMediaSettings", "/Movie", "/Sound", "/3DD")


def _empty(annot: pikepdf.Dictionary) -> None:
    """Removed annotations are also emptied: a popup's /Parent may still reach them."""
    for key in _PAYLOAD_KEYS:
        if key in annot:
            del annot[key]
