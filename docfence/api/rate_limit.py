"""A per-client-address token bucket for routes anyone may call without a key (/v1/verify), enforced as
ASGI middleware before the body is read, so a refused client cannot make the server read an upload.
The client is the connecting peer, or behind a trusted reverse proxy the hop it reports; IPv6 by /64."""

from __future__ import annotations

import ipaddress
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


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _parse(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text.strip().split("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def bucket_key(address: Address) -> str:
    """One budget per IPv4 address and per IPv6 /64 (what one host or subscriber is usually given), so
    a host cannot take fresh budgets, or push other clients out of the table, by cycling its addresses."""
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class ClientAddress:
    """Who a request counts against: the peer, unless the peer is a trusted proxy; then the rightmost
    X-Forwarded-For hop that is not itself a trusted proxy (hops left of it are the client's to forge)."""

    def __init__(self, trusted_proxies: tuple[str, ...] = ()) -> None:
        self.trusted: tuple[Network, ...] = tuple(ipaddress.ip_network(p, strict=False)
                                                  for p in trusted_proxies)

    def _is_trusted(self, address: Address) -> bool:
        return any(address.version == net.version and address in net for net in self.trusted)

    def key(self, peer: str | None, forwarded_for: list[str]) -> str:
        address = _parse(peer) if peer else None
        if address is None:
            return peer or "unknown"
        if not self.trusted or not self._is_trusted(address):
            return bucket_key(address)
        hops = [hop for header in forwarded_for for hop in header.split(",") if hop.strip()]
        for hop in reversed(hops):
            parsed = _parse(hop)
            if parsed is None:  # not what a proxy appends: count it against the proxy that passed it on
                return bucket_key(address)
            if not self._is_trusted(parsed):
                return bucket_key(parsed)
            address = parsed  # a trusted hop: the client is further left (or is this hop)
        return bucket_key(address)


class RateLimitMiddleware:
    """429 `rate_limited` with Retry-After for requests under `prefix` over their client's budget."""

    def __init__(self, app: ASGIApp, *, prefix: str, limiter: ClientRateLimiter,
                 clients: ClientAddress | None = None) -> None:
        self.app, self.prefix, self.limiter = app, prefix, limiter
        self.clients = clients or ClientAddress()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith(self.prefix):
            client = scope.get("client")
            forwarded = [value.decode("latin-1") for name, value in scope.get("headers", [])
                         if name.lower() == b"x-forwarded-for"]
            key = self.clients.key(str(client[0]) if client else None, forwarded)
            allowed, wait = self.limiter.allow(key)
            if not allowed:
                response = error_response(429, "rate_limited", "too many verification requests from this "
                                          "address; retry later", {"Retry-After": str(max(1, round(wait)))})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
