"""The request gate: the API key is checked on the headers before any body byte is read, and every
body is bounded per route in size and time.

An unauthenticated request to a route that needs a key is answered 401 at once and its connection
closed, so its body is never read, parsed or spooled to disk. A route needs a key exactly when its
handler depends on `deps.get_principal`: the gate reads that off the routes, so it cannot drift from
what the handlers require. A response sent before the request body was read to its end also closes
the connection (the rest of that body is never read).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docfence.api.deps import get_principal
from docfence.api.errors import error_response, internal_error_response
from docfence.config import ServerConfig
from docfence.core.clock import monotonic
from docfence.core.errors import StoreUnavailable, Unauthorized
from docfence.service import Service

FORM_OVERHEAD = 64 * 1024  # multipart boundaries and the small form fields next to the file
#: `openapi_extra` key a route uses to declare a body cap other than the JSON default (published).
BODY_CAP_KEY = "x-max-body-bytes"
_CLOSE = (b"connection", b"close")


@dataclass(frozen=True)
class RouteRule:
    """What the gate enforces for one route: whether a key is needed, the body cap, multipart or not."""

    path: str
    methods: frozenset[str]
    needs_key: bool
    max_body: int
    multipart: bool
    regex: re.Pattern[str]


def app_routes(app: Any) -> Iterator[tuple[str, BaseRoute]]:
    """(full path, route) of every route of a FastAPI app, included routers too."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before route contexts flattened included routes into app.routes
        for route in app.routes:
            yield str(getattr(route, "path", "")), route
        return
    for context in iter_route_contexts(app.router.routes):
        yield str(context.path or ""), context.original_route


def needs_key(route: BaseRoute) -> bool:
    """Whether the route's handler (directly or through another dependency) needs the API key."""
    if not isinstance(route, APIRoute):
        return False
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        if dep.call is get_principal:
            return True
        stack.extend(dep.dependencies)
    return False


def _is_multipart(route: BaseRoute) -> bool:
    """Whether the route reads a form: files (File) or a form model holding them (Form); either way it
    may carry an upload, so its body cap is the upload's."""
    if not isinstance(route, APIRoute):
        return False
    from fastapi.params import Form

    return any(isinstance(p.field_info, Form) for p in route.dependant.body_params)


def route_rules(app: Any, server: ServerConfig, max_upload_bytes: int) -> list[RouteRule]:
    rules = []
    for path, route in app_routes(app):
        multipart = _is_multipart(route)
        declared = (getattr(route, "openapi_extra", None) or {}).get(BODY_CAP_KEY)
        if multipart:
            cap = int(max_upload_bytes) + FORM_OVERHEAD
        else:
            cap = int(declared) if declared else server.max_json_body_bytes
        methods = frozenset(getattr(route, "methods", None) or ())
        regex, _, _ = compile_path(path)
        rules.append(RouteRule(path, methods, needs_key(route), cap, multipart, regex))
    return rules


def _match(rules: list[RouteRule], method: str, path: str) -> RouteRule | None:
    for rule in rules:
        if rule.regex.match(path) and (not rule.methods or method in rule.methods):
            return rule
    return None


def _bearer(headers: Headers) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class RequestGate:
    """ASGI middleware: authenticate on headers, then bound the body (size, idle gap, total time)."""

    def __init__(self, app: ASGIApp, *, service: Service, server: ServerConfig) -> None:
        self.app, self.service, self.server = app, service, server
        self._rules: list[RouteRule] | None = None
        self._auth = anyio.CapacityLimiter(server.max_concurrent_auth)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._rules is None:  # built on the first request, after every router was included
            self._rules = route_rules(scope["app"], self.server, self.service.settings.max_upload_bytes)
        rule = _match(self._rules, scope["method"], scope["path"])
        headers = Headers(scope=scope)
        if rule is not None and rule.needs_key:
            refusal = await self._authenticate(scope, headers)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        cap = rule.max_body if rule is not None else self.server.max_json_body_bytes
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            too_large = error_response(413, "upload_too_large", f"the request body exceeds {cap} bytes",
                                      headers={"Connection": "close"})
            await too_large(scope, receive, send)
            return
        boundary = _boundary(headers) if rule is not None and rule.multipart else None
        body = BodyGuard(receive, self.server, cap, boundary)
        await self.app(scope, body.receive, body.wrap_send(send))

    async def _authenticate(self, scope: Scope, headers: Headers) -> Any:
        """None when the key is good (the principal is left in scope["state"]), else the refusal."""
        token = _bearer(headers)
        try:
            if token is None:
                raise Unauthorized()
            async with self._auth:
                principal = await run_in_threadpool(self.service.authenticate, token)
        except Unauthorized as exc:
            return error_response(401, exc.code, exc.message,
                                  headers={"WWW-Authenticate": "Bearer", "Connection": "close"})
        except StoreUnavailable as exc:
            return error_response(503, exc.code, exc.message, headers={"Retry-After": "1",
                                                                        "Connection": "close"})
        except Exception as exc:  # nobody expected it: a 500 with an error id, its traceback logged
            return internal_error_response(exc, headers={"Connection": "close"},
                                           where=f"{scope['method']} (API key check)")
        scope.setdefault("state", {})["principal"] = principal
        return None


def _boundary(headers: Headers) -> bytes | None:
    match = re.search(r'boundary="?([^";]+)"?', headers.get("content-type", ""))
    return match.group(1).encode("latin-1") if match else None


class BodyGuard:
    """Reads the request body for the app within its cap, idle gap and total time.

    Over the cap: 413. A gap longer than `body_idle_timeout_s`, or a body still arriving after
    `body_timeout_s`: 408. A multipart body that ends without its closing boundary: 400. After the last
    body chunk `receive` passes straight through (Starlette listens there for disconnects during
    long downloads, which must not time out)."""

    def __init__(self, receive: Receive, server: ServerConfig, cap: int, boundary: bytes | None) -> None:
        self._receive, self._server, self._cap = receive, server, cap
        self._closing = b"--" + boundary + b"--" if boundary else None
        self._tail = b""
        self.total = 0
        self.done = False
        self._deadline: float | None = None

    async def receive(self) -> Message:
        if self.done:
            return await self._receive()
        now = monotonic()
        if self._deadline is None:
            self._deadline = now + self._server.body_timeout_s
        wait = min(self._server.body_idle_timeout_s, self._deadline - now)
        message: Message | None = None
        with anyio.move_on_after(max(wait, 0.0)):
            message = await self._receive()
        if message is None:
            raise HTTPException(408, "the request body did not arrive in time")
        if message["type"] != "http.request":
            self.done = True  # disconnected: nothing more will arrive
            return message
        self._count(message.get("body", b""), bool(message.get("more_body", False)))
        return message

    def _count(self, chunk: bytes, more: bool) -> None:
        self.total += len(chunk)
        if self.total > self._cap:
            raise HTTPException(413, f"the request body exceeds {self._cap} bytes")
        if self._closing is not None:
            self._tail = (self._tail + chunk)[-(len(self._closing) + 4):]
        if not more:
            self.done = True
            if self._closing is not None and self._closing not in self._tail:
                raise HTTPException(400, "the multipart body is truncated: it has no closing boundary")

    def wrap_send(self, send: Send) -> Send:
        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not self.done:
                message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
            await send(message)

        return guarded_send
