"""`[webhooks]`: how signed webhooks are delivered, and which receivers they may reach."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from docfence.config.tables import is_network, section, strings_to_tuple
from docfence.core.errors import ConfigError


@dataclass(frozen=True)
class WebhooksConfig:
    """[webhooks]: how signed webhooks are delivered (docs/webhooks.md).

    Receivers at loopback, private, link-local, multicast or unspecified addresses are refused unless
    `allow_hosts` names them (a host name as written in the URL, an IP address or a CIDR block)."""

    allow_hosts: tuple[str, ...] = ()
    public_url: str = ""  # prefix of the API links in payloads (https://pdf.example.org); empty: paths
    delivery_deadline_s: float = 86400.0  # an event not delivered by then fails with its last reason
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    backoff_base_s: float = 5.0  # attempt n waits base * 2^(n-1), with jitter, at most backoff_max_s
    backoff_max_s: float = 3600.0
    lease_s: float = 60.0  # a dispatcher's hold on one attempt; must outlast both timeouts
    batch: int = 20  # deliveries claimed per pass
    secret_grace_s: float = 86400.0  # after a rotation the old secret signs alongside the new one
    keep_events_s: float = 30 * 86400.0  # outbox events whose deliveries all finished go after this

    def __post_init__(self) -> None:
        for name in ("delivery_deadline_s", "connect_timeout_s", "read_timeout_s", "backoff_base_s",
                     "backoff_max_s", "lease_s"):
            if not 0 < getattr(self, name) <= 30 * 86400:
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be in (0, 2592000] seconds")
        if self.lease_s <= 2 * (self.connect_timeout_s + self.read_timeout_s):
            raise ConfigError(f"lease_s={self.lease_s!r}: must exceed twice connect_timeout_s + "
                              f"read_timeout_s ({2 * (self.connect_timeout_s + self.read_timeout_s):g})")
        if isinstance(self.batch, bool) or not 0 < self.batch <= 1000:
            raise ConfigError(f"batch={self.batch!r}: must be an integer in [1, 1000]")
        if not 0 <= self.secret_grace_s <= 30 * 86400:
            raise ConfigError(f"secret_grace_s={self.secret_grace_s!r}: must be in [0, 2592000] seconds")
        if not 3600 <= self.keep_events_s <= 3650 * 86400:
            raise ConfigError(f"keep_events_s={self.keep_events_s!r}: must be in [3600, 315360000] seconds")
        if self.public_url and not self.public_url.startswith(("https://", "http://")):
            raise ConfigError(f"public_url={self.public_url!r}: must start with https:// or http://")
        for host in self.allow_hosts:
            _check_allowed_host(host)


def _check_allowed_host(host: Any) -> None:
    """A host name (no spaces, slashes or colons), an IP address or a CIDR block."""
    name_like = isinstance(host, str) and bool(host) and not any(c in host for c in " /:")
    if not (name_like or (isinstance(host, str) and is_network(host))):
        raise ConfigError(f"allow_hosts entry {host!r}: must be a host name, an IP address or a CIDR "
                          "block such as 10.0.0.0/8")


def webhooks_from(table: Any) -> WebhooksConfig:
    """[webhooks]; `allow_hosts` is a TOML list of strings."""
    table = strings_to_tuple(table, "allow_hosts", "[webhooks]", "host names, IPs or CIDRs")
    webhooks: WebhooksConfig = section(WebhooksConfig, "[webhooks]", table)
    return webhooks
