"""A per-client-address token bucket for routes anyone may call without a key (/v1/verify), enforced as
ASGI middleware before the body is read, so a refused client cannot make the server read an upload."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from docfence.api.errors import error_response
from docfence.core.clock import monotonic

MAX_CLIENTS = 10_000  # addresses remembered; the least recently seen is forgotten beyond that


class ClientRateLimiter:
    """`per_minute` requests per client address, in bursts of at most `burst`. Thread-safe."""

    def __init__(self, per_minute: int, burst: int, *, clock: Callable[[], float] = monotonic) -> None:
        self.rate, self.burst, self._clock = per_minute / 60.0, float(burst), clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, at)
        self._lock = threading.Lock()

    def allow(self, address: str) -> tuple[bool, float]:
        """(allowed, seconds until the next request would be allowed)."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.pop(address, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            allowed = tokens >= 1.0
            if allowed:
                tokens -= 1.0
            self._buckets[address] = (tokens, now)
            while len(self._buckets) > MAX_CLIENTS:
                self._buckets.popitem(last=False)
        return allowed, 0.0 if allowed else (1.0 - tokens) / self.rate


class RateLimitMiddleware:
    """429 `rate_limited` with Retry-After for requests under `prefix` over their client's budget."""

    def __init__(self, app: ASGIApp, *, prefix: str, limiter: ClientRateLimiter) -> None:
        self.app, self.prefix, self.limiter = app, prefix, limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(self.prefix):
            client = scope.get("client")
            allowed, wait = self.limiter.allow(str(client[0]) if client else "unknown")
            if not allowed:
                response = error_response(429, "rate_limited", "too many verification requests from this "
                                          "address; retry later", {"Retry-After": str(max(1, round(wait)))})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
