"""API keys: created (only a hash of the secret is stored), authenticated, revoked, listed."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from docfence.core.access import Principal, check_scopes, check_tenant
from docfence.core.errors import Unauthorized
from docfence.core.records import ApiKey
from docfence.service.base import ServiceState

KEY_PREFIX = "dfk_"


_KEY_ID_RE = re.compile(r"[0-9a-f]{12}")


class ApiKeys(ServiceState):
    """The keys callers present, and the principal each one proves."""

    def create_api_key(self, tenant: str, scopes: tuple[str, ...], *, name: str = "",
                       actor: str = "cli") -> tuple[ApiKey, str]:
        """Returns the record and the full key `dfk_<id>_<secret>`; only sha256(secret) is stored."""
        check_tenant(tenant)
        scopes = check_scopes(tuple(scopes))
        key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        record = self.store.insert_api_key(key_id, tenant=tenant, name=name or key_id, scopes=tuple(scopes),
                                           key_hash=_hash_secret(secret), actor=actor)
        return record, f"{KEY_PREFIX}{key_id}_{secret}"

    def authenticate(self, presented: str | None) -> Principal:
        """Raises Unauthorized for a missing, malformed, unknown, wrong or revoked key."""
        if not presented or not presented.startswith(KEY_PREFIX):
            raise Unauthorized()
        key_id, _, secret = presented[len(KEY_PREFIX) :].partition("_")
        if not _KEY_ID_RE.fullmatch(key_id) or not secret:
            raise Unauthorized()
        record = self.store.get_api_key(key_id)
        if record is None or record.revoked_at is not None:
            raise Unauthorized()
        if not hmac.compare_digest(_hash_secret(secret), record.key_hash):
            raise Unauthorized()
        return Principal(record.id, record.tenant, record.scopes)

    def revoke_api_key(self, key_id: str, *, actor: str = "cli") -> ApiKey:
        return self.store.revoke_api_key(key_id, actor=actor)

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        return self.store.list_api_keys(tenant)


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()
