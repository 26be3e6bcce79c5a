"""`[server]`: what `docfence serve` allows a connection before and after it proves an API key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from docfence.config.tables import is_network, section, strings_to_tuple
from docfence.core.errors import ConfigError


@dataclass(frozen=True)
class ServerConfig:
    """What `docfence serve` allows a connection before and after it proves an API key.

    Keys are checked on the request headers, before any body byte is read; these bound the rest:
    how long headers and bodies may take, how large a body each kind of route accepts, and how many
    connections may wait for their headers (the oldest such connection is dropped beyond that).
    """

    header_timeout_s: float = 10.0  # from connect (or the end of the previous response) to full headers
    body_idle_timeout_s: float = 15.0  # longest gap between two body chunks
    body_timeout_s: float = 600.0  # a whole request body, however it trickles
    keep_alive_s: float = 5.0  # an idle keep-alive connection is closed after this
    max_header_bytes: int = 16 * 1024
    max_json_body_bytes: int = 1024 * 1024  # every JSON route unless it declares its own cap
    # the file `POST /v1/verify/{id}` accepts (no key: anyone may send one); its sha256 has no limit.
    # 413 beyond it, on the declared length or as soon as a streamed body passes it
    max_verify_upload_bytes: int = 4 * 1024 * 1024
    max_pending_connections: int = 256  # connections still sending their headers
    max_concurrent_auth: int = 8  # key look-ups in flight; more wait without holding a thread
    docs: bool = True  # /docs: Swagger UI served from the package (no CDN); /openapi.json is always on
    # reverse proxies (IPs or CIDRs) whose X-Forwarded-For is believed, for per-client limits on routes
    # without a key; empty: the connecting address is the client, whatever the headers say
    trusted_proxies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for entry in self.trusted_proxies:
            if not (isinstance(entry, str) and is_network(entry)):
                raise ConfigError(f"trusted_proxies entry {entry!r}: must be an IP address or a CIDR block "
                                  "such as 10.0.0.0/8")
        for name in ("header_timeout_s", "body_idle_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not 0 < getattr(self, name) <= 86400:
                raise ConfigError(f"server.{name} must be in (0, 86400]")
        for name in ("max_header_bytes", "max_json_body_bytes", "max_verify_upload_bytes",
                     "max_pending_connections", "max_concurrent_auth"):
            if isinstance(getattr(self, name), bool) or not 0 < getattr(self, name) <= 2**40:
                raise ConfigError(f"server.{name} must be a positive integer")


def server_from(table: Any) -> ServerConfig:
    """[server]; `trusted_proxies` is a TOML list of strings."""
    table = strings_to_tuple(table, "trusted_proxies", "[server]", "IP addresses or CIDRs")
    server: ServerConfig = section(ServerConfig, "[server]", table)
    return server
