"""Counts every API request by method, route template and status, and times it (docfence_http_*).

The label is the matched route's template ("/v1/jobs/{job_id}"); requests answered before routing
(refused by the key gate, unknown paths) are "unrouted". The raw path is never a label: it may carry a
signed URL's token."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docfence.core.clock import monotonic
from docfence.observability import metrics


class RequestMetrics:
    """Pure ASGI middleware (no body buffering, streaming responses untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = monotonic(), 500

        async def observe(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:  # the route is known once routing ran (or the gate refused before it: "unrouted")
            metrics.record_http(scope["method"], _template(scope), status, monotonic() - started)


def _template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return str(path) if path else "unrouted"
