"""The fault harness's TCP proxy against a loopback echo server: it forwards, black-holes both ways and
heals with nothing lost, drops only answers, cuts every connection, and an armed statement-only black
hole forwards one PostgreSQL protocol statement and holds back the rest of the same write."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from docfence.harness.tcp_proxy import Mode, TcpProxy, running_proxy
from docfence.harness.workers import wait_for


class _Echo(socketserver.BaseRequestHandler):
    received: list[bytes] = []  # everything the server got, in order (one echo server per test)

    def handle(self) -> None:
        while data := self.request.recv(65536):
            type(self).received.append(data)
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    _Echo.received = []
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with running_proxy(("127.0.0.1", server.server_address[1])) as running:
            yield running
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _client(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=5)


def _no_answer(sock: socket.socket) -> bool:
    """Nothing arrives (neither bytes nor EOF: that would be a cut) while it is watched."""
    sock.settimeout(0.3)  # how long the absence is watched; a black hole never answers
    try:
        sock.recv(10)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(5)
    return False


def test_forwards_then_blackholes_and_heals_without_losing_bytes(proxy: TcpProxy) -> None:
    with _client(proxy) as sock:
        sock.sendall(b"ping")
        assert sock.recv(10) == b"ping"
        proxy.blackhole()
        sock.sendall(b"held")
        assert _no_answer(sock)
        assert b"held" not in b"".join(_Echo.received)  # nothing reached the server either
        proxy.heal()
        assert sock.recv(10) == b"held"


def test_drop_answers_forwards_requests_only(proxy: TcpProxy) -> None:
    with _client(proxy) as sock:
        proxy.set_mode(Mode.DROP_ANSWERS)
        sock.sendall(b"lost")
        assert _no_answer(sock)
        assert b"lost" in b"".join(_Echo.received)  # the server got it; its answer was dropped


def test_cut_closes_every_connection(proxy: TcpProxy) -> None:
    with _client(proxy) as first, _client(proxy) as second:
        first.sendall(b"a")
        second.sendall(b"b")
        assert first.recv(1) == b"a" and second.recv(1) == b"b"
        assert proxy.cut() == 2
        assert first.recv(1) == b"" and second.recv(1) == b""


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size and (chunk := sock.recv(size - len(data))):
        data += chunk
    return data


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + (len(body) + 4).to_bytes(4, "big") + body


def test_statement_only_trigger_holds_back_the_rest_of_the_write(proxy: TcpProxy) -> None:
    update = (_message(b"P", b"\0UPDATE jobs SET x\0\0\0") + _message(b"B", b"\0" * 6)
              + _message(b"E", b"\0" * 5))
    rest = _message(b"S", b"") + _message(b"P", b"\0COMMIT\0\0\0")
    with _client(proxy) as sock:
        fired = proxy.arm(b"UPDATE jobs", Mode.BLACKHOLE, statement_only=True)
        sock.sendall(update + rest)
        assert fired.wait(5)
        forwarded = update + rest[:5]  # the Sync right after the Execute goes with it
        wait_for(lambda: b"".join(_Echo.received) == forwarded, 5, "the statement to reach the server")
        assert _no_answer(sock) and b"COMMIT" not in b"".join(_Echo.received)
        proxy.heal()
        assert _read(sock, len(update + rest)) == update + rest  # echoed: all of it reached the server
