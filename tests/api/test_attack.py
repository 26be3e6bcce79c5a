"""A real `docfence serve` under the attacks that used to exhaust it: a 95 MB body without a key, a
stalled unauthenticated upload, stalled headers and a stalled authenticated upload. The server's memory
high-water mark stays bounded, nothing is spooled to its temp directory, /healthz answers while every
attack connection is open, and the stalled connections are answered and closed by the server.

No timing assertion: the server's own timeouts are set short, and the test waits for the events
(a response, a closed socket) with generous socket timeouts as a safety net.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from docfence.config import Settings
from docfence.service import build_service
from docfence.testing.servers import serve_process

WAIT_S = 60.0  # safety net only: every wait below ends on a server event long before this
MB = 1024 * 1024


@dataclass
class Served:
    pid: int
    host: str
    port: int
    base: str
    spool: Path
    key: str

    def peak_rss_mb(self) -> float:
        return _status_kb(self.pid, "VmHWM") / 1024

    def rss_mb(self) -> float:
        return _status_kb(self.pid, "VmRSS") / 1024


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/{pid}/status")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/docfence.db",
                        storage_url=f"file://{tmp_path}/objects")
    service = build_service(settings)
    key = service.create_api_key("acme", ("submit", "read"))[1]
    service.store.close()
    config = tmp_path / "docfence.toml"
    config.write_text("[server]\nheader_timeout_s = 1.0\nbody_idle_timeout_s = 1.0\nbody_timeout_s = 5.0\n")
    spool = tmp_path / "spool"
    spool.mkdir()
    env = dict(os.environ, DOCFENCE_DATABASE_URL=settings.database_url,
               DOCFENCE_STORAGE_URL=settings.storage_url, DOCFENCE_CONFIG=str(config), TMPDIR=str(spool))
    with serve_process(env, tmp_path / "server.log") as (proc, base):
        port = int(base.rsplit(":", 1)[1])
        yield Served(proc.pid, "127.0.0.1", port, base, spool, key)


def _connect(served: Served) -> socket.socket:
    sock = socket.create_connection((served.host, served.port), timeout=WAIT_S)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    return sock


def _head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_response(sock: socket.socket) -> tuple[int, bytes]:
    """Status and everything the server sends until it closes the connection."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data


def _pump(sock: socket.socket, total: int, sent: list[int]) -> None:
    """Send `total` body bytes until done or the server closes the connection."""
    chunk = b"x" * (256 * 1024)
    try:
        while sent[0] < total:
            sock.sendall(chunk[: total - sent[0]])
            sent[0] += min(len(chunk), total - sent[0])
    except OSError:
        pass


def test_a_large_body_without_a_key_is_refused_before_it_is_read(served: Served) -> None:
    before = served.rss_mb()
    total = 95 * MB
    sock = _connect(served)
    sock.sendall(_head("POST", "/v1/report-requests",
                       {"Content-Type": "application/json", "Content-Length": str(total)}))
    sent = [0]
    pump = threading.Thread(target=_pump, args=(sock, total, sent), daemon=True)
    pump.start()
    status, response = _read_response(sock)  # the server answers and closes: the pump then fails
    pump.join(WAIT_S)
    sock.close()
    assert status == 401 and b'"unauthorized"' in response and b"connection: close" in response.lower()
    assert sent[0] < total  # the connection closed long before the body was through
    assert served.peak_rss_mb() < before + 64, (before, served.peak_rss_mb())
    assert list(served.spool.iterdir()) == []


def test_stalled_connections_are_closed_and_healthz_answers_meanwhile(served: Served) -> None:
    before = served.rss_mb()
    boundary = "b0undary"
    multipart = {"Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(50 * MB)}
    part = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.pdf\"\r\n"
            f"Content-Type: application/pdf\r\n\r\n").encode() + b"%" * (3 * MB)
    # 1. an unauthenticated upload that stalls after 3 MB: refused on its headers, closed, nothing spooled
    anonymous = _connect(served)
    anonymous.sendall(_head("POST", "/v1/jobs", multipart))
    sent = [0]
    threading.Thread(target=_pump, args=(anonymous, 3 * MB, sent), daemon=True).start()
    # 2. headers that never complete
    slow_headers = _connect(served)
    slow_headers.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multi")
    # 3. an authenticated upload that stalls mid-body
    stalled = _connect(served)
    stalled.sendall(_head("POST", "/v1/jobs", {**multipart, "Authorization": f"Bearer {served.key}"}))
    stalled.sendall(part[: 512 * 1024])
    # every attack connection is open now: the health probe still answers
    assert httpx.get(f"{served.base}/healthz", timeout=WAIT_S).json() == {"status": "ok"}
    assert httpx.get(f"{served.base}/readyz", timeout=WAIT_S).status_code == 200

    status, _ = _read_response(anonymous)
    assert status == 401
    assert _read_response(slow_headers)[0] == 408
    status, body = _read_response(stalled)
    assert status == 408 and b'"request_timeout"' in body
    for sock in (anonymous, slow_headers, stalled):
        sock.close()
    assert httpx.get(f"{served.base}/healthz", timeout=WAIT_S).status_code == 200
    assert served.peak_rss_mb() < before + 64, (before, served.peak_rss_mb())
    assert list(served.spool.iterdir()) == []


def test_json_bodies_are_capped_per_route_before_parsing(served: Served) -> None:
    headers = {"Authorization": f"Bearer {served.key}", "Content-Type": "application/json"}
    big = b'{"subject": "' + b"a" * (2 * MB) + b'"}'
    with httpx.Client(base_url=served.base, timeout=WAIT_S) as http:
        declared = http.post("/v1/report-requests", content=big, headers=headers)
        chunked = http.post("/v1/report-requests", content=iter([big[:MB], big[MB:]]), headers=headers)
    for response in (declared, chunked):
        assert response.status_code == 413 and response.json()["error"]["code"] == "upload_too_large"
