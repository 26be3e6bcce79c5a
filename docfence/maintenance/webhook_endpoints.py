"""Webhook endpoint use cases shared by the API and the CLI: create (the signing secret is returned
once and never again), list, disable, rotate the secret. Every call acts within one tenant."""

from __future__ import annotations

import base64
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from docfence.config import WebhooksConfig
from docfence.core.errors import InvalidRequest
from docfence.core.ids import new_id
from docfence.core.records import WebhookEndpoint
from docfence.maintenance.webhook_http import AddressPolicy, DestinationRefused, check_url
from docfence.store.base import WebhookStore
from docfence.store.outbox import EVENT_TYPES

MAX_URL_CHARS = 2000
#: Every terminal transition of a tenant's jobs writes one delivery per subscribed endpoint in the
#: transition's own transaction: the number of endpoints bounds that cost.
MAX_ENDPOINTS_PER_TENANT = 20


@dataclass(frozen=True)
class IssuedSecret:
    """An endpoint with the secret that was just issued for it (shown to its owner this once)."""

    endpoint: WebhookEndpoint
    secret: str = field(repr=False)


def new_secret() -> str:
    """A Standard Webhooks secret: `whsec_` + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def check_events(events: Iterable[str]) -> tuple[str, ...]:
    """The event types of a subscription; `*` means all of them."""
    chosen = [e.strip() for e in events if e.strip()]
    if chosen == ["*"]:
        return EVENT_TYPES
    bad = [e for e in chosen if e not in EVENT_TYPES]
    if not chosen or bad:
        raise InvalidRequest(f"events must be * or a list of {', '.join(EVENT_TYPES)}", field="events")
    return tuple(dict.fromkeys(chosen))


def check_endpoint_url(url: str, config: WebhooksConfig) -> str:
    """A plain http(s) URL; an address written in it must pass the SSRF policy already now (host names
    are resolved and checked again at every delivery)."""
    if not isinstance(url, str) or not 0 < len(url) <= MAX_URL_CHARS or _has_controls(url):
        raise InvalidRequest(f"url must be 1-{MAX_URL_CHARS} printable characters", field="url")
    try:
        _, host, _ = check_url(url)
        ipaddress.ip_address(host)
    except DestinationRefused as exc:
        raise InvalidRequest(f"url: {exc}", field="url") from None
    except ValueError:
        return url  # a host name
    try:
        AddressPolicy(config.allow_hosts).check(host, [host])
    except DestinationRefused as exc:
        raise InvalidRequest(f"url: {exc}", field="url") from None
    return url


def _has_controls(text: str) -> bool:
    return any(ord(c) < 32 or 127 <= ord(c) < 160 or 0xD800 <= ord(c) < 0xE000 for c in text)


class WebhookEndpoints:
    def __init__(self, store: WebhookStore, config: WebhooksConfig) -> None:
        self.store, self.config = store, config

    def create(self, tenant: str, url: str, events: Iterable[str], *, actor: str,
               description: str | None = None) -> IssuedSecret:
        if description is not None and (len(description) > 200 or _has_controls(description)):
            raise InvalidRequest("description must be at most 200 printable characters", field="description")
        enabled = [e for e in self.store.list_webhook_endpoints(tenant) if e.disabled_at is None]
        if len(enabled) >= MAX_ENDPOINTS_PER_TENANT:
            raise InvalidRequest(f"a tenant has at most {MAX_ENDPOINTS_PER_TENANT} enabled webhook "
                                 "endpoints; disable one first", field="url")
        secret = new_secret()
        endpoint = self.store.insert_webhook_endpoint(
            new_id("whe"), tenant=tenant, url=check_endpoint_url(url, self.config),
            events=check_events(events), secret=secret, description=description, actor=actor)
        return IssuedSecret(endpoint, secret)

    def list(self, tenant: str | None) -> list[WebhookEndpoint]:
        return self.store.list_webhook_endpoints(tenant)

    def disable(self, tenant: str, endpoint_id: str, *, actor: str) -> WebhookEndpoint:
        return self.store.disable_webhook_endpoint(endpoint_id, tenant=tenant, actor=actor)

    def rotate(self, tenant: str, endpoint_id: str, *, actor: str) -> IssuedSecret:
        secret = new_secret()
        endpoint = self.store.rotate_webhook_secret(endpoint_id, tenant=tenant, secret=secret,
                                                    grace_s=self.config.secret_grace_s, actor=actor)
        return IssuedSecret(endpoint, secret)
