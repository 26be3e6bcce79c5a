"""The operator console (`/console`) and the `/metrics` endpoint, as FastAPI routers for the API app."""

from __future__ import annotations

from docfence.api.console.routes import install, metrics_router, router

__all__ = ["install", "metrics_router", "router"]
