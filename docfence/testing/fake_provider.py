"""A scriptable fake of the docfence provider protocol: a real HTTP server on loopback (plus a second
"storage" server for signed URLs) that plays a per-job script of status answers and records every
request, so tests can assert on counts and headers. Test-only; never imported by production code."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

Step = tuple[Any, ...]
"""One scripted answer to a status GET (the last step repeats forever):
("status", value[, reason])   200 {"id", "state": value[, "error": {"code": reason}]}
("http", code[, headers])     that status code, a small JSON error body, optional headers
("raw", bytes)                200 application/json with exactly these bytes
("json", obj)                 200 with obj serialised (e.g. no "state" at all)
("drop",)                     close the connection without answering
Submit steps (FakeProvider.submit_script, consumed one per POST): ("http", code[, headers]) answers
without creating; ("drop_after_create",) creates (or finds) the job, then drops the connection."""


@dataclass(frozen=True)
class RecordedRequest:
    server: str  # "api" or "storage"
    method: str
    path: str  # with query string
    headers: dict[str, str]  # names lower-cased


@dataclass
class FakeJob:
    id: str
    script: list[Step]
    position: int = 0
    data: bytes = b""
    filename: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    signature: str = field(default_factory=lambda: secrets.token_urlsafe(8))

    def next_step(self) -> Step:
        step = self.script[min(self.position, len(self.script) - 1)]
        self.position += 1
        return step


class FakeProvider:
    """Start with `with FakeProvider() as fake:`; `fake.base_url` is the API, `fake.storage_url` the
    origin of signed URLs."""

    def __init__(
        self,
        *,
        api_key: str = "test-api-key",
        default_script: Sequence[Step] = (("status", "queued"), ("status", "succeeded")),
        artifact: bytes = b"%PDF-1.7\n% fake artifact\n%%EOF\n",
    ) -> None:
        self.api_key = api_key
        self.default_script = list(default_script)
        self.artifact = artifact
        self.submit_script: list[Step] = []
        self.next_scripts: list[list[Step]] = []  # scripts for the next jobs created by submit
        self.artifact_redirect_code = 302
        self.jobs: dict[str, FakeJob] = {}
        self.creations = 0
        self._by_key: dict[str, str] = {}
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> FakeProvider:
        for role in ("api", "storage"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self, role))
            server.daemon_threads = True
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.01}, name=f"fake-{role}", daemon=True
            )  # a short poll interval keeps stop() fast
            thread.start()
            self._servers.append((server, thread))
        return self

    def stop(self) -> None:
        for server, thread in self._servers:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
        self._servers.clear()

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._servers[0][0].server_address[1]}"

    @property
    def storage_url(self) -> str:
        return f"http://127.0.0.1:{self._servers[1][0].server_address[1]}"

    # -- scripting and inspection ---------------------------------------------------------------------

    def add_job(self, script: Iterable[Step]) -> str:
        """Create a job directly (no submit) that plays `script`."""
        with self._lock:
            return self._create(list(script)).id

    def set_script(self, job_id: str, script: Iterable[Step]) -> None:
        with self._lock:
            self.jobs[job_id].script = list(script)
            self.jobs[job_id].position = 0

    def signed_url(self, job_id: str) -> str:
        return f"{self.storage_url}/signed/{job_id}?sig={self.jobs[job_id].signature}"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_to(
        self, server: str, path_prefix: str = "/", method: str | None = None
    ) -> list[RecordedRequest]:
        return [
            r
            for r in self.requests
            if r.server == server
            and r.path.startswith(path_prefix)
            and (method is None or r.method == method)
        ]

    # -- internals (called from server threads) ------------------------------------------------------

    def _create(self, script: list[Step] | None = None) -> FakeJob:
        self.creations += 1
        job_id = f"job-{self.creations}"
        if script is None:
            script = self.next_scripts.pop(0) if self.next_scripts else list(self.default_script)
        job = FakeJob(job_id, script)
        self.jobs[job_id] = job
        return job

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _submit(self, key: str | None, parts: dict[str, tuple[str | None, bytes]]) -> tuple[FakeJob, bool]:
        with self._lock:
            if key is not None and key in self._by_key:
                return self.jobs[self._by_key[key]], False
            job = self._create()
            if key is not None:
                self._by_key[key] = job.id
            filename, data = parts.get("file", (None, b""))
            job.data, job.filename = data, filename
            job.fields = {k: v.decode() for k, (fn, v) in parts.items() if k != "file" and fn is None}
            return job, True

    def _next_submit_step(self) -> Step | None:
        with self._lock:
            return self.submit_script.pop(0) if self.submit_script else None

    def _next_status_step(self, job_id: str) -> Step | None:
        with self._lock:
            job = self.jobs.get(job_id)
            return job.next_step() if job else None


def _parse_multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            parts[name] = (part.get_filename(), payload)
    return parts


def _handler_for(fake: FakeProvider, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        provider = fake
        server_role = role

    return Handler


class _Handler(BaseHTTPRequestHandler):
    provider: FakeProvider
    server_role: str

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def _start(self) -> bool:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.provider._record(RecordedRequest(self.server_role, self.command, self.path, headers))
        if self.server_role == "storage":
            return True
        if headers.get("authorization") != f"Bearer {self.provider.api_key}":
            self._json(401, {"error": "unauthorized"})
            return False
        return True

    def _json(self, code: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        self._send(code, json.dumps(doc).encode(), headers)

    def _send(
        self,
        code: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _drop(self) -> None:
        self.close_connection = True

    def do_POST(self) -> None:
        if not self._start():
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if urlsplit(self.path).path != "/v1/jobs":
            self._json(404, {"error": "not_found"})
            return
        step = self.provider._next_submit_step()
        if step is not None and step[0] == "http":
            self._json(step[1], {"error": "scripted"}, step[2] if len(step) > 2 else None)
            return
        parts = _parse_multipart(self.headers.get("Content-Type", ""), body)
        job, created = self.provider._submit(self.headers.get("Idempotency-Key"), parts)
        if step is not None and step[0] == "drop_after_create":
            self._drop()
            return
        self._json(201 if created else 200, {"id": job.id, "state": "queued"})

    def do_GET(self) -> None:
        if not self._start():
            return
        url = urlsplit(self.path)
        segments = [unquote(s) for s in url.path.split("/")[1:]]
        if self.server_role == "storage":
            self._signed(segments, parse_qs(url.query).get("sig", [""])[0])
        elif len(segments) == 3 and segments[:2] == ["v1", "jobs"]:
            self._status(segments[2])
        elif len(segments) == 4 and segments[:2] == ["v1", "jobs"] and segments[3] == "artifact":
            self._artifact(segments[2])
        else:
            self._json(404, {"error": "not_found"})

    def _status(self, job_id: str) -> None:
        step = self.provider._next_status_step(job_id)
        if step is None:
            self._json(404, {"error": "not_found"})
        elif step[0] == "status":
            doc: dict[str, Any] = {"id": job_id, "state": step[1]}
            if len(step) > 2:
                doc["error"] = {"code": step[2]}
            if step[1] == "succeeded":
                doc["result_url"] = self.provider.signed_url(job_id)
            self._json(200, doc)
        elif step[0] == "http":
            self._json(step[1], {"error": "scripted"}, step[2] if len(step) > 2 else None)
        elif step[0] == "raw":
            self._send(200, step[1])
        elif step[0] == "json":
            self._json(200, step[1])
        elif step[0] == "drop":
            self._drop()
        else:
            raise ValueError(f"unknown script step {step!r}")

    def _artifact(self, job_id: str) -> None:
        if job_id not in self.provider.jobs:
            self._json(404, {"error": "not_found"})
            return
        location = self.provider.signed_url(job_id)
        self._send(self.provider.artifact_redirect_code, b"", {"Location": location})

    def _signed(self, segments: list[str], signature: str) -> None:
        job = self.provider.jobs.get(segments[1]) if len(segments) == 2 and segments[0] == "signed" else None
        if job is None or not secrets.compare_digest(signature, job.signature):
            self._json(403, {"error": "bad_signature"})
            return
        self._send(200, self.provider.artifact, content_type="application/pdf")
