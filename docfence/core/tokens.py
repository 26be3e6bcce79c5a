"""Signed download tokens: `<base64url JSON payload>.<base64url HMAC-SHA256>`, compared in constant time.

The payload names the job, attempt, sha256, expiry (`e`, unix seconds) and the key that minted it (`k`);
the service checks what the payload names (artifact still published, key not revoked) after `verify`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from typing import Any

from docfence.core.errors import SignedUrlExpired, SignedUrlInvalid

_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{1,800}\.[A-Za-z0-9_-]{43}")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, body: str) -> str:
    return _b64(hmac.new(secret, body.encode("ascii"), hashlib.sha256).digest())


def sign(payload: dict[str, Any], secret: bytes) -> str:
    body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    return f"{body}.{_mac(secret, body)}"


def verify(token: str, secret: bytes, now_ts: float) -> dict[str, Any]:
    """The payload of an untampered, unexpired token; raises SignedUrlInvalid or SignedUrlExpired."""
    if not _TOKEN_RE.fullmatch(token):  # also keeps non-ASCII text away from hmac
        raise SignedUrlInvalid()
    body, _, mac = token.partition(".")
    if not hmac.compare_digest(mac, _mac(secret, body)):
        raise SignedUrlInvalid()
    try:
        payload: dict[str, Any] = json.loads(_unb64(body))
        expires = float(payload["e"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SignedUrlInvalid() from exc
    if now_ts >= expires:
        raise SignedUrlExpired()
    return payload
