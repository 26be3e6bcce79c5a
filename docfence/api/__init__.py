"""The HTTP API: FastAPI app factory `create_app(settings, store=None, blobs=None)` over service.py."""

from __future__ import annotations

from docfence.api.app import create_app, serve

__all__ = ["create_app", "serve"]
