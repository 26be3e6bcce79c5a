"""What the sanitiser looks for: the kinds of active content and hidden data, how an action is classified,
and which policy decides each kind. Shared by the sanitiser and the residue check so they cannot drift.
A URI action is classified by its scheme: javascript:, vbscript:, data: and file: are active content."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pikepdf

from docfence.core.policy import SanitizePolicy

# action type -> kind; actions not listed (GoTo, Named, SetOCGState, Hide, ResetForm, Thread, Trans)
# only move inside the document and are kept
ACTIVE_ACTIONS = {
    "/JavaScript": "javascript",
    "/Launch": "launch",
    "/URI": "uri_action",
    "/SubmitForm": "submit_form",
    "/ImportData": "import_data",
    "/GoToR": "remote_document",
    "/GoToE": "remote_document",
    "/Rendition": "rich_media",
    "/RichMediaExecute": "rich_media",
    "/Sound": "rich_media",
    "/Movie": "rich_media",
}
# URI schemes that run code or reach local or inline content: active content wherever the URI sits (a
# visible link too), whatever link_uris says; any other scheme (http, https, mailto, ...) is a plain URI
ACTIVE_URI_SCHEMES = {"javascript": "javascript_uri", "vbscript": "vbscript_uri", "data": "data_uri",
                      "file": "file_uri"}
ACTIVE_KINDS = frozenset(
    {"javascript", "launch", "uri_action", "submit_form", "import_data", "remote_document", "rich_media",
     "xfa", *ACTIVE_URI_SCHEMES.values()}
)
HIDDEN_KINDS = frozenset({"info_metadata", "xmp_metadata", "thumbnail", "piece_info", "private_data"})
BOTH_KINDS = frozenset({"embedded_file"})  # active content (issue of executables) and hidden data
LINK_KINDS = frozenset({"link_uri"})
MEDIA_ANNOTATIONS = frozenset({"/RichMedia", "/Screen", "/Movie", "/Sound", "/3D"})
MAX_ACTION_CHAIN = 64
DICT = pikepdf.Dictionary
# hidden data any object may carry: (key, kind, type its value must have to count)
HIDDEN_KEYS = (
    ("/Metadata", "xmp_metadata", pikepdf.Stream),
    ("/Thumb", "thumbnail", pikepdf.Stream),
    ("/PieceInfo", "piece_info", pikepdf.Dictionary),
)
# catalog keys every reader understands; any other key is private data (and where bombs and leftovers hide)
CATALOG_KEYS = frozenset({
    "/Type", "/Version", "/Extensions", "/Pages", "/PageLabels", "/Names", "/Dests", "/ViewerPreferences",
    "/PageLayout", "/PageMode", "/Outlines", "/Threads", "/OpenAction", "/AA", "/URI", "/AcroForm",
    "/Metadata", "/StructTreeRoot", "/MarkInfo", "/Lang", "/OutputIntents", "/PieceInfo", "/OCProperties",
    "/Perms", "/Legal", "/Requirements", "/Collection", "/NeedsRendering", "/DSS", "/AF", "/DPartRoot",
})


@dataclass(frozen=True)
class Finding:
    """One item found: its kind and where (page numbers and key paths; never document content)."""

    kind: str
    where: str


def decision(kind: str, policy: SanitizePolicy) -> str:
    """keep | strip | refuse for one kind under `policy`."""
    if kind in LINK_KINDS:
        return policy.link_uris
    if kind in HIDDEN_KINDS:
        return policy.hidden_data
    if kind in BOTH_KINDS:
        if policy.active_content == "refuse":
            return "refuse"
        return "strip" if "strip" in (policy.active_content, policy.hidden_data) else "keep"
    return policy.active_content


def stripped_kinds(policy: SanitizePolicy) -> frozenset[str]:
    every = ACTIVE_KINDS | HIDDEN_KINDS | BOTH_KINDS | LINK_KINDS
    return frozenset(k for k in every if decision(k, policy) == "strip")


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_IGNORED = str.maketrans("", "", "\t\n\r")  # readers drop these anywhere in a URI (WHATWG URL parsing)


def uri_scheme(value: pikepdf.Object | None) -> str | None:
    """The lower-cased scheme of a URI as a reader sees it: leading spaces and control characters are
    skipped and tabs and line breaks removed, as readers tolerate; None when it has none (relative)."""
    if not isinstance(value, pikepdf.String):
        return None
    raw = bytes(value)
    text = raw[2:].decode("utf-16-be", "replace") if raw[:2] == b"\xfe\xff" else raw.decode("latin-1")
    text = text.translate(_IGNORED).lstrip("".join(map(chr, range(0x21))))
    match = _SCHEME.match(text)
    return match.group(1).lower() if match else None


def uri_kind(action: pikepdf.Object) -> str:
    """The kind of one /URI action: its scheme's kind when the scheme is active, else uri_action."""
    return ACTIVE_URI_SCHEMES.get(uri_scheme(action.get("/URI")) or "", "uri_action")


def base_uri_kind(root: pikepdf.Object) -> str | None:
    """The kind of the catalog's /URI /Base when its scheme is active (readers resolve relative link URIs
    against it, so a javascript: base makes every relative link a script); None otherwise."""
    uri = root.get("/URI")
    base = uri.get("/Base") if isinstance(uri, pikepdf.Dictionary) else None
    return ACTIVE_URI_SCHEMES.get(uri_scheme(base) or "")


def action_kinds(action: pikepdf.Object) -> list[str]:
    """Kinds of the active actions in `action` and its /Next chain (bounded, loop-safe)."""
    kinds: list[str] = []
    stack: list[pikepdf.Object] = [action]
    seen: set[tuple[int, int]] = set()
    steps = 0
    while stack and steps < MAX_ACTION_CHAIN:
        steps += 1
        node = stack.pop()
        if isinstance(node, pikepdf.Array):
            stack.extend(node)
            continue
        if not isinstance(node, pikepdf.Dictionary):
            continue
        if node.is_indirect:
            if node.objgen in seen:
                continue
            seen.add(node.objgen)
        kind = ACTIVE_ACTIONS.get(str(node.get("/S", "")))
        if kind == "uri_action":
            kind = uri_kind(node)
        if kind is None and "/JS" in node:
            kind = "javascript"
        if kind:
            kinds.append(kind)
        if "/Next" in node:
            stack.append(node.Next)
    if stack:
        kinds.append("javascript")  # an action chain too long to read is treated as the worst kind
    return kinds
