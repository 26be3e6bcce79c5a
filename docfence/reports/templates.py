"""Template versions: create (version = max + 1, content hash, JSON Schema checked), read and list.
A version is never edited; creating identical content again returns the newest version unchanged.

Every template id has one owner: the tenant whose admin created it, or nobody (None) for a template an
operator shared with every tenant. Reads take `visible_to` (store.reports.ALL_TENANTS, a tenant, or
None for an operator); another tenant's template is indistinguishable from a missing one."""

from __future__ import annotations

import base64
import binascii
import logging
import re
from pathlib import Path
from typing import Any

from docfence.core.errors import NotFound, TemplateError
from docfence.core.records import TemplateInfo, TemplateVersion
from docfence.engines.report.bundle import TemplateBundle, load_bundle, template_hash
from docfence.engines.report.data import check_schema
from docfence.store.base import ReportStore
from docfence.store.reports import ALL_TENANTS

log = logging.getLogger(__name__)

TEMPLATE_ID_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_TEMPLATE_BYTES = 20 * 1024 * 1024


def check_template_id(template_id: str) -> str:
    if not isinstance(template_id, str) or not TEMPLATE_ID_RE.fullmatch(template_id):
        raise TemplateError("template id must match [a-z0-9][a-z0-9_-]* (at most 64 characters)")
    return template_id


def bundle_of(version: TemplateVersion) -> TemplateBundle:
    """The renderer's view of a stored version."""
    assets = {name: base64.b64decode(text) for name, text in version.assets.items()}
    return TemplateBundle(name=version.info.name, html=version.html, css=version.css, assets=assets,
                          schema=version.schema)


def encode_assets(bundle: TemplateBundle) -> dict[str, str]:
    return {name: base64.b64encode(bytes(data)).decode("ascii") for name, data in bundle.assets.items()}


class Templates:
    """Template use cases over the report store."""

    def __init__(self, store: ReportStore) -> None:
        self.store = store

    def create_version(
        self, template_id: str, bundle: TemplateBundle, *, actor: str, owner: str | None = None
    ) -> tuple[TemplateInfo, bool]:
        """(info, created). Raises TemplateError for a bad id, an oversized bundle or an invalid schema
        (including one that refers outside itself: such a reference is refused here, naming it);
        TemplateIdTaken when the id belongs to another owner (`owner` None: shared by an operator)."""
        check_template_id(template_id)
        size = len(bundle.html) + len(bundle.css) + sum(len(v) for v in bundle.assets.values())
        if size > MAX_TEMPLATE_BYTES:
            raise TemplateError(f"the template bundle exceeds {MAX_TEMPLATE_BYTES} bytes")
        check_schema(bundle.schema)
        sha = template_hash(bundle)
        try:
            latest = self.store.get_template(template_id, visible_to=owner)
        except NotFound:
            latest = None
        if latest is not None and latest.info.owner == owner and latest.info.sha256 == sha:
            return latest.info, False
        version = self.store.insert_template_version(
            template_id, name=bundle.name, sha256=sha, html=bundle.html, css=bundle.css,
            assets=encode_assets(bundle), schema=bundle.schema, actor=actor, owner=owner,
        )
        log.info("template %s version %d created", template_id, version.info.version)
        return version.info, True

    def create_from_parts(
        self, template_id: str, *, name: str | None, html: str, css: str, assets_b64: dict[str, str],
        schema: dict[str, Any], actor: str, owner: str | None = None,
    ) -> tuple[TemplateInfo, bool]:
        """`create_version` from wire parts (assets as base64); raises TemplateError on bad base64."""
        try:
            assets = {k: base64.b64decode(v, validate=True) for k, v in assets_b64.items()}
        except (binascii.Error, ValueError) as exc:
            raise TemplateError("template assets must map names to base64 text") from exc
        bundle = TemplateBundle(name=name or template_id, html=html, css=css, assets=assets, schema=schema)
        return self.create_version(template_id, bundle, actor=actor, owner=owner)

    def create_from_dir(self, template_id: str, path: str | Path, *, actor: str,
                        owner: str | None = None) -> tuple[TemplateInfo, bool]:
        """Load template.html, style.css, schema.json and assets from a folder, then `create_version`."""
        return self.create_version(template_id, load_bundle(path, name=template_id), actor=actor, owner=owner)

    def get(self, template_id: str, version: int | None = None, *,
            visible_to: str | None = ALL_TENANTS) -> TemplateVersion:
        return self.store.get_template(template_id, version, visible_to=visible_to)

    def list(self, template_id: str | None = None, *,
             visible_to: str | None = ALL_TENANTS) -> list[TemplateInfo]:
        return self.store.list_templates(template_id, visible_to=visible_to)
