"""What the API publishes about itself: `/openapi.json`, which states this server's configuration
(its document classes, processors, class limits and logos), and `/docs`: Swagger UI (5.x, which reads
OpenAPI 3.1) served from the static files of the swagger-ui-py package (Apache-2.0), never from a CDN,
under a CSP that allows this origin only, so the API documentation works offline and loads no outside code.

`/docs` is on unless `server.docs` is false; `/openapi.json` is served either way (FastAPI's own route).
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, HTMLResponse

from docfence.api.wire import CONFIGURED, mark_text_pattern
from docfence.config import Settings
from docfence.core.errors import NotFound

_INIT = Path(__file__).parent / "static" / "docs-init.js"
_FILES = {"swagger-ui.css": "text/css", "swagger-ui-bundle.js": "text/javascript",
          "favicon-32x32.png": "image/png", "docs-init.js": "text/javascript"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>docfence API</title>
<link rel="stylesheet" href="/docs/static/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/static/favicon-32x32.png"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script src="/docs/static/docs-init.js"></script></body></html>
"""


def _bundle_dir() -> Path:
    """swagger-ui-py's static folder, found without importing the package (it imports web frameworks)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise NotFound("Swagger UI is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


router = APIRouter(include_in_schema=False)


@router.get("/docs")
def docs_page() -> HTMLResponse:
    return HTMLResponse(_PAGE, headers={"Content-Security-Policy": CSP, "X-Frame-Options": "DENY",
                                        "Cache-Control": "no-store"})


@router.get("/docs/static/{name}")
def docs_static(name: str) -> FileResponse:
    if name not in _FILES:
        raise NotFound("no such documentation file")
    path = _INIT if name == "docs-init.js" else _bundle_dir() / name
    return FileResponse(path, media_type=_FILES[name], headers={"X-Content-Type-Options": "nosniff"})


def install_docs(app: FastAPI, enabled: bool) -> None:
    if enabled:
        app.include_router(router)


def configured_facts(settings: Settings) -> dict[str, dict[str, Any]]:
    """What the settings decide of request values, as the schema keywords that say it (see
    wire.CONFIGURED). Where classes differ (deadline bound, mark count, fields, logos) the schema states
    the widest class; the service checks the chosen class's own rule and names it in the refusal."""
    classes = settings.all_classes().values()
    rules = [c.mark_rules for c in classes]
    fields = sorted({name for r in rules for name in r.allowed_fields})
    logos = sorted({name for r in rules for name, _ in r.images})
    image: dict[str, Any] = {"anyOf": [{"enum": logos}, {"type": "null"}]} if logos else {"type": "null"}
    return {
        "document_class": {"type": "string", "enum": ["", *sorted(settings.all_classes())],
                           "description": "A configured document class (empty: the default class)"},
        "processor": {"type": "string", "enum": ["local", *settings.report_processors]},
        "deadline_s": {"type": "number", "exclusiveMinimum": 0,
                       "maximum": max(c.max_deadline_s for c in classes)},
        "mark_text": {"pattern": mark_text_pattern(fields)},
        "mark_image": {**image, "description": "A logo of the document class, by name"},
        "max_marks": {"maxItems": max(r.max_marks for r in rules)},
    }


def fill_configured(node: Any, facts: dict[str, dict[str, Any]]) -> Any:
    """`node` (a JSON Schema document, changed in place) with every CONFIGURED marker replaced by its
    fact's keywords."""
    if isinstance(node, dict):
        fact = node.pop(CONFIGURED, None)
        if fact is not None:
            node.update(facts[fact])
        for value in node.values():
            fill_configured(value, facts)
    elif isinstance(node, list):
        for value in node:
            fill_configured(value, facts)
    return node


def publish_openapi(app: FastAPI, settings: Settings) -> None:
    """`/openapi.json` (built once, on first use) with the configured facts filled in."""
    facts = configured_facts(settings)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            # a deep copy: the schema may share dicts with module constants (wire.JOB_MARK), which
            # another app, of other settings, publishes too
            app.openapi_schema = fill_configured(copy.deepcopy(FastAPI.openapi(app)), facts)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise it
