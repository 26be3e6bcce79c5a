"""Report template bundles: the immutable parts of one template version, their stable sha256,
and loading a bundle from a directory (template.html, style.css, schema.json, every other file an asset)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from docfence.core.errors import TemplateError

HTML_FILE = "template.html"
CSS_FILE = "style.css"
SCHEMA_FILE = "schema.json"
_HASH_DOMAIN = b"docfence.template-bundle.v1"


@dataclass(frozen=True)
class TemplateBundle:
    """One immutable template version. `assets` maps relative POSIX names ("img/logo.svg") to bytes;
    they are the only files a render may load."""

    name: str
    html: str
    css: str
    assets: Mapping[str, bytes] = field(default_factory=dict)
    schema: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A read-only copy: a caller mutating its dict afterwards cannot change what was hashed.
        object.__setattr__(self, "assets", MappingProxyType(dict(self.assets)))


def _chunk(data: bytes) -> bytes:
    """Length-prefixed bytes, so no two different bundles can encode to the same stream."""
    return len(data).to_bytes(8, "big") + data


def canonical_schema(schema: Mapping[str, Any]) -> bytes:
    """The schema as canonical JSON (sorted keys, no whitespace, UTF-8)."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def template_hash(bundle: TemplateBundle) -> str:
    """sha256 (hex) over every part of the bundle; independent of asset order and stable across runs."""
    digest = hashlib.sha256(_chunk(_HASH_DOMAIN))
    for part in (
        bundle.name.encode(),
        bundle.html.encode(),
        bundle.css.encode(),
        canonical_schema(bundle.schema),
    ):
        digest.update(_chunk(part))
    names = sorted(bundle.assets)
    digest.update(len(names).to_bytes(8, "big"))
    for name in names:
        digest.update(_chunk(name.encode()))
        digest.update(_chunk(bytes(bundle.assets[name])))
    return digest.hexdigest()


def _read_assets(root: Path) -> dict[str, bytes]:
    assets: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            raise TemplateError(f"template bundle contains a symlink: {rel}")
        if path.is_file() and rel not in (HTML_FILE, CSS_FILE, SCHEMA_FILE) and "__pycache__" not in rel:
            assets[rel] = path.read_bytes()
    return assets


def load_bundle(path: str | Path, name: str | None = None) -> TemplateBundle:
    """Load a bundle from a directory. Symlinks are refused so a bundle cannot smuggle in outside files.

    Raises TemplateError when a required part is missing or the schema is not a JSON object."""
    root = Path(path)
    try:
        html = (root / HTML_FILE).read_text(encoding="utf-8")
        css = (root / CSS_FILE).read_text(encoding="utf-8")
        schema = json.loads((root / SCHEMA_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TemplateError(f"template bundle {root.name!r} is incomplete or unreadable") from exc
    if not isinstance(schema, dict):
        raise TemplateError(f"template bundle {root.name!r}: schema.json must be a JSON object")
    return TemplateBundle(
        name=name or root.name, html=html, css=css, assets=_read_assets(root), schema=schema
    )
