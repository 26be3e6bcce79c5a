"""Real HTTP servers on loopback for tests: uvicorn serving an ASGI app in a thread, or the API as
its own process (`docfence serve`)."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from docfence.core.interpreter import module_command
from docfence.harness.tcp_proxy import free_port


@contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on a free loopback port in a thread; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # proxy_headers off, as `docfence serve` runs: uvicorn would otherwise rewrite the client address
    # from X-Forwarded-For for loopback peers, and tests of docfence's own proxy handling would lie
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                           proxy_headers=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextmanager
def serve_process(env: dict[str, str], log_path: Path, *, command: Sequence[str] = ("docfence.cli", "serve"),
                  log_level: str = "warning") -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Run `python -m docfence.cli serve` (or `command`) as its own process on a free loopback port,
    its output in `log_path`; yields (process, base URL) once /healthz answers; terminates it after."""
    import httpx

    port = free_port()
    cmd = module_command(*command, "--port", str(port), "--log-level", log_level)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):  # start-up imports the engines: allow a loaded machine a minute
                if proc.poll() is not None:
                    raise AssertionError(f"the server exited with {proc.returncode}")
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    threading.Event().wait(0.1)
            yield proc, base
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@contextmanager
def recording_http_server(
    body: bytes = b"", content_type: str = "application/json"
) -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that answers every GET with `body` and records each path it was asked
    for; yields (base URL, paths). Tests that must prove nothing is fetched assert the list stays empty."""
    import http.server

    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
