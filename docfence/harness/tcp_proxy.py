"""A TCP proxy on loopback between a docfence process and a server it talks to (PostgreSQL, S3), which a
fault test switches between forwarding, a black hole (connections stay open, nothing moves in either
direction until it heals), lost answers (requests reach the server, its answers are dropped) and a cut
(every open connection is closed). A mode can also be armed to start right after the client sends
given bytes, so a fault lands at a chosen statement (inside a transaction, or just after its COMMIT).

The proxy's own kernel acknowledges what a black-holed client sends, so a client's TCP keepalives and
`tcp_user_timeout` see a live peer: only what the application does about an answer that never comes
(heartbeat and statement deadlines) and the server's own session limits are exercised through it."""

from __future__ import annotations

import enum
import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

__all__ = ["Mode", "TcpProxy", "free_port", "running_proxy"]

_CHUNK = 65536
_POLL_S = 0.05  # how often an idle pump looks at the mode again


class Mode(enum.Enum):
    FORWARD = "forward"
    BLACKHOLE = "blackhole"  # nothing read, nothing sent, both ways; queued bytes flow on heal
    DROP_ANSWERS = "drop_answers"  # client -> server forwarded; server -> client read and discarded


@dataclass
class _Pair:
    client: socket.socket
    upstream: socket.socket
    closed: threading.Event = field(default_factory=threading.Event)
    held: bytes = b""  # client bytes a trigger kept back: they reach the server when it heals

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.upstream):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class TcpProxy:
    """Listens on 127.0.0.1:`port` (0: a free one) and forwards each connection to `target`."""

    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._mode = Mode.FORWARD
        self._armed: tuple[bytes, Mode, bool] | None = None
        self._triggered = threading.Event()
        self._pairs: list[_Pair] = []
        self._stopping = threading.Event()
        self._accepter = threading.Thread(target=self._accept_loop, name="tcp-proxy-accept", daemon=True)
        self._accepter.start()

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            self._mode, self._armed = mode, None

    def blackhole(self) -> None:
        self.set_mode(Mode.BLACKHOLE)

    def heal(self) -> None:
        self.set_mode(Mode.FORWARD)

    def arm(self, pattern: bytes, mode: Mode, *, statement_only: bool = False) -> threading.Event:
        """Switch to `mode` once a client sends bytes containing `pattern` (those bytes still reach
        the server). `statement_only` (PostgreSQL's protocol): only the statement holding `pattern` is
        forwarded, up to its Execute (and a Sync or Flush right after); whatever the client sent with
        it in the same write (the rest of a pipelined transaction, its COMMIT) is held back until the
        proxy heals. Returns an event set when it happened."""
        with self._lock:
            self._armed = (pattern, mode, statement_only)
            self._triggered = threading.Event()
            return self._triggered

    def cut(self) -> int:
        """Close every open connection (clients see a reset or EOF); returns how many were cut."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.close()
        return len(pairs)

    def upstream_ports(self) -> list[int]:
        """The local ports of the proxy's connections to the target: PostgreSQL shows them as
        pg_stat_activity.client_port, which tells a test which backends sit behind the proxy."""
        with self._lock:
            pairs = [p for p in self._pairs if not p.closed.is_set()]
        ports = []
        for pair in pairs:
            try:
                ports.append(int(pair.upstream.getsockname()[1]))
            except OSError:
                continue
        return ports

    def close(self) -> None:
        self._stopping.set()
        self._listener.close()
        self.cut()
        self._accepter.join(timeout=5)

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], _POLL_S)
                if not ready:
                    continue
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()  # the target is down: the client sees the connection closed
                continue
            upstream.settimeout(None)
            pair = _Pair(client, upstream)
            with self._lock:
                self._pairs.append(pair)
            for src, dst, upward in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(pair, src, dst, upward), daemon=True,
                                 name="tcp-proxy-pump").start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket, upward: bool) -> None:
        """Move bytes one way for one connection while the mode lets them; ends the pair on EOF."""
        try:
            while not pair.closed.is_set():
                if self._blackholed():
                    pair.closed.wait(_POLL_S)
                    continue
                if upward and pair.held:  # healed: what a trigger kept back goes first
                    held, pair.held = pair.held, b""
                    dst.sendall(held)
                ready, _, _ = select.select([src], [], [], _POLL_S)
                if not ready or self._blackholed():  # the mode may have changed while waiting
                    continue
                data = src.recv(_CHUNK)
                if not data:
                    break
                if upward:
                    data, pair.held = self._maybe_trigger(pair.held + data)
                elif self._mode is Mode.DROP_ANSWERS:
                    continue  # the server answered; the answer is lost on the way
                dst.sendall(data)
        except OSError:
            pass
        pair.close()

    def _blackholed(self) -> bool:
        return self._mode is Mode.BLACKHOLE

    def _maybe_trigger(self, data: bytes) -> tuple[bytes, bytes]:
        """(bytes to forward now, bytes to hold back) for what a client sent."""
        with self._lock:
            if self._armed is None or self._armed[0] not in data:
                return data, b""
            pattern, mode, statement_only = self._armed
            self._mode, self._armed = mode, None  # set before these bytes are sent
            self._triggered.set()
        end = _end_of_statement(data, data.index(pattern)) if statement_only else None
        return (data, b"") if end is None else (data[:end], data[end:])


def _end_of_statement(data: bytes, at: int) -> int | None:
    """Where the frontend message after the Execute that follows offset `at` ends (a Sync or Flush
    right after the Execute is included); None when `data` is not whole protocol messages."""
    offset, executed = 0, False
    while offset + 5 <= len(data):
        kind, end = data[offset:offset + 1], offset + 1 + int.from_bytes(data[offset + 1:offset + 5], "big")
        if end > len(data):
            return None
        if executed:
            return end if kind in (b"S", b"H") else offset
        executed = kind == b"E" and end > at
        offset = end
    return offset if executed and offset == len(data) else None


def free_port() -> int:
    """A loopback port nothing listens on now (for a server a fault run starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_proxy(target: tuple[str, int]) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target)
    try:
        yield proxy
    finally:
        proxy.close()
