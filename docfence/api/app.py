"""The FastAPI app factory and the uvicorn runner (access log off: signed URLs carry tokens in the path)."""

from __future__ import annotations

import errno
import logging
import socket

from fastapi import FastAPI

from docfence.api import jobs, public, reports_routes, verify_routes, webhooks_routes
from docfence.api.console import install as install_console
from docfence.api.docs import install_docs
from docfence.api.errors import error_responses, install_error_handlers
from docfence.api.gate import RequestGate
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
    app.state.report_processors = tuple(settings.report_processors)
    install_console(app)  # /console, /console/api/*, /metrics
    # The key is checked before anything reads the body.
    app.add_middleware(RequestGate, service=service, server=settings.server)
    # Outermost: requests the gate refuses are counted too (by route template, never the raw path).
    app.add_middleware(RequestMetrics)
    return app


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
