"""The artifact download through a signed URL: streamed, its sha256 verified, written atomically; and
the signed URL's token kept out of httpx's and httpcore's logs (a signed URL is a credential)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from pathlib import Path

import httpx

from docfence.client.errors import DownloadIntegrityError, TransportError
from docfence.client.wire import raise_for_status

_SIGNED = "/v1/signed/"


class _RedactSignedUrls(logging.Filter):
    """httpx logs request URLs (INFO) and httpcore response headers (DEBUG); a signed URL is a
    credential, so its token is redacted from both."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and _SIGNED in record.msg:
            record.msg = str(_redact(record.msg))
        if isinstance(record.args, tuple) and any(_SIGNED in str(a) for a in record.args):
            record.args = tuple(_redact(a) for a in record.args)
        return True


def _redact(value: object) -> object:
    text = str(value)
    if _SIGNED not in text:
        return value
    head, _, _ = text.partition(_SIGNED)
    return f"{head}{_SIGNED}<redacted>"


for _name in ("httpx", "httpcore.http11", "httpcore.http2"):
    logging.getLogger(_name).addFilter(_RedactSignedUrls())


def stream_to(http: httpx.Client, url: httpx.URL, target: Path, expected_sha256: str) -> None:
    """Stream `url` into `target`: the file appears only whole and with the expected sha256 (raises
    DownloadIntegrityError otherwise, leaving no partial file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, http.stream("GET", url) as response:
            if response.status_code >= 400:
                response.read()
            raise_for_status(response)
            for chunk in response.iter_bytes():
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != expected_sha256:
            raise DownloadIntegrityError(f"artifact sha256 mismatch for {target.name}")
        os.replace(tmp, target)
    except httpx.HTTPError as exc:
        _unlink(tmp)
        raise TransportError(f"download failed: {type(exc).__name__}") from exc
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
