"""An ASGI guard that bounds request bodies before the multipart parser spools them to disk.

The exact byte limit is enforced while streaming to storage (service.submit); this guard only stops
bodies that cannot possibly fit (declared or counted size above the limit plus form overhead).
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docfence.api.errors import error_response

FORM_OVERHEAD = 64 * 1024  # multipart boundaries and the small form fields next to the file


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes + FORM_OVERHEAD

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            response = error_response(413, "upload_too_large", "the upload exceeds the maximum size")
            await response(scope, receive, send)
            return
        total = 0

        async def counting_receive() -> Message:
            nonlocal total
            message = await receive()
            total += len(message.get("body", b""))
            if total > self.max_bytes:
                raise HTTPException(413, "the upload exceeds the maximum size")
            return message

        await self.app(scope, counting_receive, send)
