"""Anonymous verification takes a small file only (issue 30, L6): `POST /v1/verify/{id}` needs no key, so
a file beyond `server.max_verify_upload_bytes` (default 4 MiB) is refused with a coded 413 and the
connection closed, on its declared Content-Length before a byte of it is read, and as soon as a chunked
body passes the limit; a file within it and a sha256 of any file are still compared."""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docfence.config import DocumentClass, ServerConfig, VerificationConfig
from docfence.core.policy import VerificationSpec
from docfence.samples import pdfs

from .conftest import ApiEnv, api_env

MB = 1024 * 1024
LIMIT = 1 * MB  # the test server's limit; the default is checked on its own
TOTAL = 64 * MB  # what an attacker offers: far more than the limit plus every socket buffer between
BOUNDARY = "verifyboundary"
CLASSES = {"default": DocumentClass("default"),
           "shared": DocumentClass("shared", verification=VerificationSpec(pages="all"))}
CONFIG = VerificationConfig(public_base_url="https://verify.example.org/", organisation="Example Health",
                            requests_per_minute=600, burst=100)
WAIT_S = 30.0


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    server = ServerConfig(max_verify_upload_bytes=LIMIT, body_idle_timeout_s=5.0, body_timeout_s=30.0)
    with api_env(tmp_path, classes=CLASSES, verification=CONFIG, server=server) as e:
        yield e


def _issued(env: ApiEnv, data: bytes) -> tuple[str, str]:
    with env.client(env.key()) as client:
        job = client.submit(pdfs.many_pages(1), document_class="shared")
    env.finish(job.id, data)
    spec = env.store.get(job.id).policy.verification
    assert spec is not None
    return job.id, spec.code


def test_the_default_limit_is_a_few_megabytes() -> None:
    assert ServerConfig().max_verify_upload_bytes == 4 * MB


def _connect(env: ApiEnv) -> socket.socket:
    host, port = env.base_url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    return sock


def _head(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1",
             f"Content-Type: multipart/form-data; boundary={BOUNDARY}",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _part_head() -> bytes:
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d.pdf\"\r\n"
            "Content-Type: application/pdf\r\n\r\n").encode()


def _read_response(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        data += chunk
    return data


def _offer(sock: socket.socket, head: bytes, chunked: bool) -> tuple[bytes, int]:
    """Send `head`, then up to TOTAL body bytes from a thread (stopping when the server closes);
    the whole response, and how many body bytes went out."""
    sent = [0]

    def pump() -> None:
        block = b"x" * (256 * 1024)
        try:
            sock.sendall(head)
            while sent[0] < TOTAL:
                sock.sendall(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
                sent[0] += len(block)
        except OSError:  # the server answered and closed: the rest is never sent
            pass

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    response = _read_response(sock)
    thread.join(WAIT_S)
    sock.close()
    return response, sent[0]


def _assert_refused(response: bytes) -> None:
    status_line, _, rest = response.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413"), response[:300]
    assert b'"upload_too_large"' in rest and b"connection: close" in rest.lower()


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(env: ApiEnv) -> None:
    job_id, code = _issued(env, b"%PDF-1.4 issued\n")
    head = _head(f"/v1/verify/{job_id}?c={code}", {"Content-Length": str(TOTAL)}) + _part_head()
    response, sent = _offer(_connect(env), head, chunked=False)
    _assert_refused(response)
    assert sent < TOTAL // 4, sent  # refused on the headers: the body stopped at the socket buffers


def test_a_chunked_body_is_refused_once_it_passes_the_limit(env: ApiEnv) -> None:
    job_id, code = _issued(env, b"%PDF-1.4 issued\n")
    head = _head(f"/v1/verify/{job_id}?c={code}", {"Transfer-Encoding": "chunked"})
    first = _part_head()
    head += b"%x\r\n%s\r\n" % (len(first), first)
    response, sent = _offer(_connect(env), head, chunked=True)
    _assert_refused(response)
    assert LIMIT <= sent < TOTAL // 4, sent  # read up to the limit, then not one chunk more than buffered


def test_a_file_within_the_limit_and_a_sha256_are_still_compared(env: ApiEnv) -> None:
    issued = b"%PDF-1.4 " + b"x" * (LIMIT - 16) + b"\n"  # just within the limit
    job_id, code = _issued(env, issued)
    url = f"{env.base_url}/v1/verify/{job_id}"
    sent = httpx.post(url, params={"c": code}, files={"file": ("d.pdf", issued, "application/pdf")},
                      timeout=WAIT_S)
    assert sent.status_code == 200 and sent.json()["match"] is True, sent.text
    bigger = issued + b"y" * (LIMIT + 1)
    refused = httpx.post(url, params={"c": code}, files={"file": ("d.pdf", bigger, "application/pdf")},
                         timeout=WAIT_S)
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "upload_too_large"
    by_hash = httpx.post(url, params={"c": code}, data={"sha256": hashlib.sha256(issued).hexdigest()},
                         timeout=WAIT_S)
    assert by_hash.status_code == 200 and by_hash.json()["match"] is True
