"""The HTTP/1.1 protocol `docfence serve` runs: uvicorn's h11 protocol plus a header deadline and a cap
on connections that are still sending their headers.

uvicorn arms no timer before the first request of a connection, and its keep-alive timer stops at the
first byte, so a client trickling header bytes could hold a connection for ever. Here every request's
headers must be complete within `header_timeout_s` of the connection opening (or of the previous
response ending), else the connection gets a 408 and is closed. At most `max_pending_connections`
connections may be waiting for their headers; a new one beyond that closes the oldest, so a flood of
stalled connections cannot lock out a client (a health probe) that sends its headers at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from docfence.config import ServerConfig

_TIMEOUT_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"connection: close\r\ncontent-length: 31\r\n\r\nthe request headers timed out\r\n")


class PendingConnections:
    """Connections of one server still waiting for request headers, oldest first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._waiting: dict[int, Callable[[], None]] = {}  # id(protocol) -> close it

    def add(self, key: int, close: Callable[[], None]) -> None:
        self._waiting.pop(key, None)
        self._waiting[key] = close
        while len(self._waiting) > self.limit:
            oldest = next(iter(self._waiting))
            self._waiting.pop(oldest)()

    def discard(self, key: int) -> None:
        self._waiting.pop(key, None)

    def __len__(self) -> int:
        return len(self._waiting)


class GuardedH11Protocol(H11Protocol):
    """H11Protocol with the header deadline and the pending-connection cap (see the module docstring)."""

    header_timeout_s: ClassVar[float] = 10.0
    pending: ClassVar[PendingConnections] = PendingConnections(256)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._bytes_this_request = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        self._bytes_this_request += len(data)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the request line and headers are complete
            self._headers_done()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may already start the next pipelined request
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._bytes_this_request = 0
            self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_done()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        self._headers_done()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_timed_out)
        self.pending.add(id(self), self._drop)

    def _headers_done(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self.pending.discard(id(self))

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            if self._bytes_this_request:
                self.transport.write(_TIMEOUT_408)
            self._drop()

    def _drop(self) -> None:
        self._headers_done()
        if not self.transport.is_closing():
            self.transport.close()


def protocol_for(server: ServerConfig) -> type[GuardedH11Protocol]:
    """A protocol class for one server, with its own pending-connection set and its settings."""
    attrs = {"header_timeout_s": server.header_timeout_s,
             "pending": PendingConnections(server.max_pending_connections)}
    return type("GuardedH11Protocol", (GuardedH11Protocol,), attrs)
