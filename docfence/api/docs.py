"""`/docs`: Swagger UI (5.x, which reads OpenAPI 3.1) served from the static files of the swagger-ui-py
package (Apache-2.0), never from a CDN, under a CSP that allows this origin only, so the API
documentation works offline and loads no outside code.

On unless `server.docs` is false; `/openapi.json` is served either way (FastAPI's own route).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, HTMLResponse

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
