"""A route prefix's own upload cap, below the request gate's: anonymous verification (`POST
/v1/verify/{id}`) takes a file of at most `server.max_verify_upload_bytes`, refused with 413 on its
declared length before a byte of it is read, or as soon as a streamed (chunked) body passes it."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from docfence.api.errors import error_response
from docfence.api.gate import FORM_OVERHEAD, BodyGuard
from docfence.config import ServerConfig


class UploadCap:
    """ASGI middleware: a `method` request under `prefix` carries at most `max_file_bytes` of file, plus
    the multipart form around it (gate.FORM_OVERHEAD). Beyond: 413 `upload_too_large`. Mounted inside
    the request gate, whose send closes the connection of a response sent before its body was read to
    the end, so the rest of such a body is never read; the gate's own BodyGuard counts the stream here
    too (its idle and total timeouts apply as well)."""

    def __init__(self, app: ASGIApp, *, prefix: str, method: str, max_file_bytes: int,
                 server: ServerConfig) -> None:
        self.app, self.prefix, self.method, self.server = app, prefix, method, server
        self.max_file_bytes = max_file_bytes
        self.cap = max_file_bytes + FORM_OVERHEAD

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != self.method or \
                not str(scope["path"]).startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.cap:
            refusal = error_response(413, "upload_too_large",
                                     f"a file to verify may have at most {self.max_file_bytes} bytes: "
                                     "send its sha256 instead")
            await refusal(scope, receive, send)
            return
        body = BodyGuard(receive, self.server, self.cap, None)  # the gate checks the closing boundary
        await self.app(scope, body.receive, send)
