"""The residue check: an independent scan of a finished PDF proving nothing of the stripped kinds is left.

It does not follow the sanitiser's walk; it reads every object reachable from the trailer (where a writer
puts everything it keeps), so an item in a place the sanitiser does not visit still shows up here and
fails validation instead of leaving the organisation. The one exception is the identification packet
docfence writes for a report's declared variant (engines/variant_proof.py): a catalog /Metadata that is
byte for byte such a packet, and an /Info holding only its title, are docfence's, not the document's.
"""

from __future__ import annotations

from typing import Any

import pikepdf

from docfence.core.policy import SanitizePolicy
from docfence.engines.pdf_objects import ARRAY, is_container
from docfence.engines.sanitize_kinds import (
    ACTIVE_ACTIONS,
    CATALOG_KEYS,
    DICT,
    HIDDEN_KEYS,
    MEDIA_ANNOTATIONS,
    Finding,
    base_uri_kind,
    stripped_kinds,
    uri_kind,
)
from docfence.engines.variant_proof import Identification, docfence_packet, info_is_title_of

_MAX_NODES = 5_000_000
_MAX_FAILURES = 10


def find_residue(pdf: pikepdf.Pdf, policy: SanitizePolicy) -> list[Finding]:
    """Every item of a kind `policy` strips that is still reachable in `pdf` (empty: the output is clean)."""
    wanted = stripped_kinds(policy)
    found: list[Finding] = []
    ours = docfence_packet(pdf) if "xmp_metadata" in wanted else None
    ours_at = pdf.Root.objgen if ours is not None else None  # the catalog whose /Metadata is docfence's
    info = pdf.trailer.get("/Info")
    if "info_metadata" in wanted and isinstance(info, pikepdf.Dictionary) and info.keys() \
            and not (ours is not None and info_is_title_of(pdf, ours)):
        found.append(Finding("info_metadata", "trailer /Info"))
    if "private_data" in wanted:
        private = sorted(k for k in pdf.Root.keys() if k not in CATALOG_KEYS)  # noqa: SIM118 (a set: sorted)
        found += [Finding("private_data", f"catalog {k}") for k in private]
    base = base_uri_kind(pdf.Root)
    if base in wanted:
        found.append(Finding(base, "catalog /URI /Base"))
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[pikepdf.Object, str]] = [(pdf.Root, "catalog")]
    steps = 0
    while stack and steps < _MAX_NODES:
        steps += 1
        node, where = stack.pop()
        if node.is_indirect:  # an indirect array too: read once however many places (or itself) name it
            if node.objgen in seen:
                continue
            seen.add(node.objgen)
            where = f"object {node.objgen[0]}"
        if node._type_code is ARRAY:
            stack.extend((v, where) for v in node if is_container(v))
            continue
        kinds = _kinds(node, frozenset(node.keys()))
        if ours_at is not None and node.objgen == ours_at:
            kinds = [k for k in kinds if k != "xmp_metadata"]
        found += [Finding(kind, where) for kind in kinds if kind in wanted]
        for key, value in node.items():
            if is_container(value) and not _is_kept_link_uri(node, key, wanted):
                stack.append((value, where))
    if stack:
        found.append(Finding("unscanned", "the document is too large to scan completely"))
    return found


def _is_kept_link_uri(node: pikepdf.Object, key: str, wanted: frozenset[str]) -> bool:
    """The plain URI action of a link annotation (/A, or /PA: the URI Web Capture saved when it made the
    link a go-to), when links keep their URIs, is not residue; one whose scheme is active (javascript:,
    data:, ...) is read like any other action."""
    if key not in ("/A", "/PA") or "link_uri" in wanted or node.get("/Subtype") != pikepdf.Name.Link:
        return False
    action = node.get(key)
    return isinstance(action, pikepdf.Dictionary) and action.get("/S") == pikepdf.Name.URI \
        and "/Next" not in action and uri_kind(action) == "uri_action"


def _kinds(node: pikepdf.Object, keys: frozenset[str]) -> list[str]:
    """Kinds `node` holds; keys are judged by the type of their value, since structure role maps and
    similar name-keyed dictionaries may use any name as a key. Reads only the keys `node` has (`keys`):
    a lookup of an absent key costs pikepdf as much as a present one, and most nodes hold none of them."""
    kinds = []
    kind = ACTIVE_ACTIONS.get(str(node["/S"])) if "/S" in keys else None
    if kind == "uri_action":
        kind = uri_kind(node)
    if kind:
        kinds.append(kind)
    if _is(node, keys, "/JS", pikepdf.String | pikepdf.Stream) or _is(node, keys, "/JavaScript", DICT):
        kinds.append("javascript")
    if ("/Type" in keys and node["/Type"] == pikepdf.Name.EmbeddedFile) or _is(node, keys, "/EF", DICT) \
            or _is(node, keys, "/EmbeddedFiles", DICT):
        kinds.append("embedded_file")
    subtype = str(node["/Subtype"]) if "/Subtype" in keys else ""
    if subtype == "/FileAttachment" and "/FS" in keys:
        kinds.append("embedded_file")
    if subtype in MEDIA_ANNOTATIONS or _is(node, keys, "/RichMediaContent", DICT):
        kinds.append("rich_media")
    if _is(node, keys, "/XFA", pikepdf.Stream | pikepdf.Array):
        kinds.append("xfa")
    for key, kind, types in HIDDEN_KEYS:
        if _is(node, keys, key, types):
            kinds.append(kind)
    return list(dict.fromkeys(kinds))


def _is(node: pikepdf.Object, keys: frozenset[str], key: str, types: Any) -> bool:
    return key in keys and isinstance(node[key], types)


def residue_check(output: pikepdf.Pdf, policy: SanitizePolicy) -> dict[str, Any]:
    """The validator's check entry: ok when nothing of a stripped kind is left in the output."""
    left = find_residue(output, policy)
    failures = [f"{f.kind} left at {f.where}" for f in left[:_MAX_FAILURES]]
    kinds = sorted(stripped_kinds(policy))
    entry = {"name": "sanitised", "ok": not left, "failures": failures, "kinds": kinds}
    ours = docfence_packet(output) if "xmp_metadata" in kinds else None
    if ours is not None:
        entry["kept"] = [_kept(ours)]
    return entry


def _kept(ours: Identification) -> str:
    title = ", with its title" if ours.title else ""
    return f"catalog /Metadata: docfence's {ours.variant} identification packet{title}"
