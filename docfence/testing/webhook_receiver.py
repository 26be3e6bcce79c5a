"""A real webhook receiver on loopback for tests: verifies every request's Standard Webhooks signature
with the `standardwebhooks` library, dedupes on `webhook-id`, and can be told to refuse (down), answer
500, hang until released, or answer slowly (status line first, the rest once the test says so)."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass
class Receiver:
    secret: str
    mode: str = "ok"  # ok | 500 | hang | slow | drip
    received: list[tuple[str, int]] = field(default_factory=list)  # (webhook-id, docfence-attempt)
    bad_signatures: int = 0
    payloads: dict[str, Any] = field(default_factory=dict)  # deduped on webhook-id
    headers: list[dict[str, str]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)  # ends a hang, finishes a slow answer
    mid_answer: threading.Event = field(default_factory=threading.Event)  # a slow answer has begun
    arrived: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in handler.headers.items()}
        try:
            payload = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            with self.lock:
                self.bad_signatures += 1
            handler.send_response(400)
            handler.end_headers()
            return
        with self.lock:
            self.received.append((headers["webhook-id"], int(headers.get("docfence-attempt", "0"))))
            self.payloads.setdefault(headers["webhook-id"], payload)
            self.headers.append(headers)
        self.arrived.set()
        self._answer(handler)

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        if self.mode == "hang":
            self.release.wait(60)  # bounded only so a broken test cannot leave the thread behind
            return
        if self.mode == "500":
            handler.send_response(500)
            handler.send_header("content-length", "600")
            handler.end_headers()
            handler.wfile.write(b"x" * 600)
            return
        if self.mode == "drip":  # a byte every 50 ms until released: no read ever waits long
            for byte in b"HTTP/1.1 200 OK\r\nx-padding: " + b"x" * 10_000:
                if self.release.wait(0.05):
                    return
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            return
        if self.mode == "slow":
            handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
            handler.wfile.flush()
            self.mid_answer.set()
            self.release.wait(60)
            handler.wfile.write(b"content-length: 2\r\nconnection: close\r\n\r\nok")
            return
        handler.send_response(204)
        handler.end_headers()


@contextmanager
def receiving(receiver: Receiver, port: int = 0, *, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """Serve `receiver` on 127.0.0.1:`port` (0: a free one) in a thread, over TLS with `tls`; yields its
    URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # the stdlib's name
            receiver.handle(self)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        scheme = "https" if tls is not None else "http"
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}/hooks/docfence"
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def payload_text(receiver: Receiver) -> str:
    return json.dumps(receiver.payloads, sort_keys=True)


def tls_pair(folder: Path, host: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A throwaway CA and a server certificate for `host`: (the server's context, a client context
    that trusts only that CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from docfence.core.clock import utcnow

    now = utcnow()
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
          .not_valid_after(now + timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (folder / "server.pem").write_bytes(leaf.public_bytes(pem) + key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(folder / "server.pem")
    client = ssl.create_default_context(cadata=ca.public_bytes(pem).decode())
    return server, client
