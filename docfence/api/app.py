"""The FastAPI app factory, the methods every path answers to (RFC 9110 `Allow`, OPTIONS) and the uvicorn
runner (access log off: signed URLs carry tokens in the path)."""

from __future__ import annotations

import errno
import logging
import re
import socket

from fastapi import FastAPI
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from docfence.api import jobs, public, reports_routes, verify_routes, webhooks_routes
from docfence.api.console import install as install_console
from docfence.api.docs import install_docs, publish_openapi
from docfence.api.errors import error_response, error_responses, install_error_handlers
from docfence.api.gate import RequestGate, app_routes
from docfence.api.protocol import protocol_for
from docfence.api.request_metrics import RequestMetrics
from docfence.blobs import BlobStore, RegionRouter
from docfence.config import Settings
from docfence.core.clock import Clock
from docfence.core.errors import ConfigError
from docfence.service import Service, build_service
from docfence.store.base import Store

log = logging.getLogger(__name__)


def create_app(
    settings: Settings, store: Store | None = None, blobs: RegionRouter | BlobStore | None = None,
    *, clock: Clock | None = None, service: Service | None = None,
) -> FastAPI:
    """Build the API over `settings` (opening the store and blob stores it names unless given)."""
    service = service or build_service(settings, store, blobs, clock=clock)
    app = FastAPI(
        title="docfence", version="0.1.0",
        description="Fenced, deadline-bounded PDF jobs. Every accepted job reaches a terminal state.",
        docs_url=None, redoc_url=None,  # FastAPI's pages load Swagger UI and ReDoc from a CDN
        responses=error_responses(500),  # every route documents its 500 answer, with its error id
    )
    app.state.service = service
    install_error_handlers(app)
    app.include_router(jobs.router)
    app.include_router(public.router)
    app.include_router(reports_routes.router)
    verify_routes.install(app, settings, service.clock.monotonic)  # no key; limited per client address
    app.include_router(webhooks_routes.router)
    install_docs(app, settings.server.docs)
    publish_openapi(app, settings)
    app.state.report_processors = tuple(settings.report_processors)
    install_console(app)  # /console, /console/api/*, /metrics
    # Inside the rate limit and the gate (an OPTIONS needs no key: no route takes it).
    app.add_middleware(PathMethods)
    # The key is checked before anything reads the body.
    app.add_middleware(RequestGate, service=service, server=settings.server)
    # Outermost: requests the gate refuses are counted too (by route template, never the raw path).
    app.add_middleware(RequestMetrics)
    return app


#: The order `Allow` lists methods in.
_METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class PathMethods:
    """ASGI middleware: each path is one resource, answering to every method of its routes (RFC 9110).

    FastAPI makes one route per method, and Starlette's 405 names only the first route that matched the
    path, so `Allow` missed the others (GET /v1/jobs and POST /v1/jobs are two routes). Here a request
    whose method the path does not take is answered 405 with `Allow` listing all of them, and OPTIONS
    on any route's path is answered 204 with that `Allow`. Where templates overlap (/v1/jobs/batch and
    /v1/jobs/{job_id}), the path belongs to the most literal one: /v1/jobs/batch is the batch resource.
    A path no route matches goes on to the router (404)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._table: list[tuple[re.Pattern[str], int, frozenset[str]]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._table is None:  # built on the first request, after every router was included
            self._table = _methods_by_path(scope["app"])
        allowed = _allowed(self._table, scope["path"])
        method = scope["method"]
        if allowed is None or method in allowed:
            await self.app(scope, receive, send)
            return
        allow = ", ".join(m for m in _METHOD_ORDER if m in allowed | {"OPTIONS"})
        if method == "OPTIONS":
            answer = Response(status_code=204, headers={"Allow": allow})
        else:
            answer = error_response(405, "method_not_allowed", f"{method} is not allowed on this path "
                                    f"(allowed: {allow})", headers={"Allow": allow})
        await answer(scope, receive, send)


def _methods_by_path(app: FastAPI) -> list[tuple[re.Pattern[str], int, frozenset[str]]]:
    """(path regex, number of path parameters, methods) per route template, templates merged."""
    merged: dict[str, set[str]] = {}
    for path, route in app_routes(app):
        methods = getattr(route, "methods", None)
        if methods:  # mounts and websocket routes have none: the router answers for them
            merged.setdefault(path, set()).update(methods)
    table = []
    for path, methods in merged.items():
        regex, _, params = compile_path(path)
        table.append((regex, len(params), frozenset(methods)))
    return table


def _allowed(table: list[tuple[re.Pattern[str], int, frozenset[str]]], path: str) -> frozenset[str] | None:
    """The methods of the most literal template matching `path` (fewest parameters), None if none does."""
    matches = [(params, methods) for regex, params, methods in table if regex.match(path)]
    if not matches:
        return None
    fewest = min(params for params, _ in matches)
    return frozenset().union(*(methods for params, methods in matches if params == fewest))


class _NoSignedPaths(logging.Filter):
    """Belt and braces: drop any log record that would print a signed-URL path."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            return "/v1/signed/" not in record.getMessage()
        except Exception:  # a malformed record is not ours to judge
            return True


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8080, *, log_level: str = "info") -> None:
    """Run the API with uvicorn until interrupted. The access log is off (tokens live in paths).

    The address is bound first, so a port in use or out of range is one ConfigError naming it, before
    the app opens anything. The h11 protocol is docfence's guarded one (header deadline, pending-
    connection cap); header size, keep-alive and every body bound come from `settings.server`."""
    import uvicorn

    from docfence.logs import configure

    configure(log_level.upper())  # JSON lines, redacted; log_config=None keeps uvicorn on them
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).addFilter(_NoSignedPaths())
    sock = listen_socket(host, port)
    try:
        server = settings.server
        config = uvicorn.Config(
            create_app(settings), access_log=False, log_level=log_level, log_config=None,
            server_header=False, proxy_headers=False, http=protocol_for(server),
            timeout_keep_alive=int(max(1, server.keep_alive_s)),
            h11_max_incomplete_event_size=server.max_header_bytes)
        uvicorn_server = uvicorn.Server(config)
        bound_host, bound_port = sock.getsockname()[:2]
        log.info("docfence API running on http://%s:%d", bound_host, bound_port)
        uvicorn_server.run(sockets=[sock])
    finally:
        sock.close()
    if not uvicorn_server.started:  # uvicorn logged why (the app's start-up failed)
        raise SystemExit(1)


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port; ConfigError, one line naming the address, when it cannot be
    had (in use, out of range, an address this host does not have)."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: out of range (0-65535)")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: restarts reuse the port
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        in_use = exc.errno == errno.EADDRINUSE
        hint = " (stop the process using it, or choose another --port)" if in_use else ""
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
    return sock
