"""Sending one webhook request without server-side request forgery: resolve the receiver's host, refuse
loopback, private, link-local, multicast, reserved and unspecified addresses unless the allow-list names
them, then connect to the very address that was checked (no second lookup). No redirects, bounded
connect and read timeouts, and at most BODY_PREFIX_BYTES of the answer are read."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from docfence.core.clock import Clock, SystemClock

BODY_PREFIX_BYTES = 256
Resolver = Callable[[str, int], Sequence[str]]
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class DestinationRefused(Exception):
    """The receiver's URL or address is not allowed; retrying cannot help."""


@dataclass(frozen=True)
class Sent:
    """What one request observed: a status, or the error that prevented one."""

    status_code: int | None
    latency_ms: float
    error: str | None = None
    body_prefix: str | None = None


def resolve(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for `host` (IPv4 and IPv6), in its order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _special(ip: IpAddress) -> bool:
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        return _special(mapped)
    return (not ip.is_global or ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast
            or ip.is_unspecified or ip.is_reserved)


class AddressPolicy:
    """Which receivers are allowed: public addresses, plus what `allow_hosts` names (a host name as
    written in the URL, an IP address or a CIDR block)."""

    def __init__(self, allow_hosts: Sequence[str] = ()) -> None:
        self.networks = []
        self.names = set()
        for entry in allow_hosts:
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.names.add(entry.lower().rstrip("."))

    def check(self, host: str, addresses: Sequence[str]) -> IpAddress:
        """The address to connect to (the first one); raises DestinationRefused when any address is
        special and not allowed (a name that resolves to a public and a private address is refused)."""
        if not addresses:
            raise DestinationRefused(f"{host} resolves to no address")
        ips = [ipaddress.ip_address(a.split("%")[0]) for a in addresses]
        if host.lower().rstrip(".") not in self.names:
            for ip in ips:
                if _special(ip) and not any(ip in net for net in self.networks):
                    where = f"{host} is" if host == str(ip) else f"{host} resolves to {ip},"
                    raise DestinationRefused(f"{where} a non-public address; list it in [webhooks] "
                                             "allow_hosts to allow it")
        return ips[0]


def check_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a receiver URL; raises DestinationRefused for anything but a plain
    http(s) URL with a host (no user info, no fragment)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DestinationRefused("the URL must be http:// or https:// with a host")
    if parts.username is not None or parts.password is not None or parts.fragment:
        raise DestinationRefused("the URL must carry no user name, password or #fragment")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationRefused("the URL's port is not a number in 1-65535") from None
    return parts.scheme, parts.hostname, port


@dataclass(frozen=True)
class Timeouts:
    connect_s: float
    read_s: float


class GuardedTransport:
    """POSTs one body to a receiver under the address policy (`send` is the one I/O seam)."""

    def __init__(self, policy: AddressPolicy, timeouts: Timeouts, *, resolver: Resolver = resolve,
                 clock: Clock | None = None) -> None:
        self.policy, self.timeouts, self.resolver = policy, timeouts, resolver
        self.clock = clock or SystemClock()

    def send(self, url: str, body: bytes, headers: Mapping[str, str]) -> Sent:
        """Raises DestinationRefused before any connection for a refused URL or address."""
        scheme, host, port = check_url(url)
        started = self.clock.monotonic()
        try:
            addresses = self.resolver(host, port)
        except OSError as exc:
            return Sent(None, self._ms(started), f"cannot resolve {host} ({exc.strerror or exc})")
        ip = self.policy.check(host, addresses)
        parts = urlsplit(url)
        netloc = f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
        target = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
        extensions = {"sni_hostname": host} if scheme == "https" else {}
        send_headers = {**headers, "host": parts.netloc}
        timeout = httpx.Timeout(connect=self.timeouts.connect_s, read=self.timeouts.read_s,
                                write=self.timeouts.read_s, pool=self.timeouts.connect_s)
        try:
            with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
                request = client.build_request("POST", target, content=body, headers=send_headers,
                                               extensions=extensions)
                response = client.send(request, stream=True)
                try:
                    prefix = _read_prefix(response)
                finally:
                    response.close()
        except httpx.TimeoutException as exc:
            return Sent(None, self._ms(started), _timeout_name(exc))
        except httpx.HTTPError as exc:
            return Sent(None, self._ms(started), f"{type(exc).__name__}: {str(exc)[:200]}")
        return Sent(response.status_code, self._ms(started), None, prefix)

    def _ms(self, started: float) -> float:
        return round((self.clock.monotonic() - started) * 1000.0, 3)


def _read_prefix(response: httpx.Response) -> str:
    """At most BODY_PREFIX_BYTES of the (undecoded) answer; the rest is never read."""
    kept = b""
    for chunk in response.iter_raw(BODY_PREFIX_BYTES):
        kept += chunk
        if len(kept) >= BODY_PREFIX_BYTES:
            break
    return kept[:BODY_PREFIX_BYTES].decode("utf-8", "replace")


def _timeout_name(exc: httpx.TimeoutException) -> str:
    names = {httpx.ConnectTimeout: "connect timeout", httpx.ReadTimeout: "read timeout",
             httpx.WriteTimeout: "write timeout", httpx.PoolTimeout: "pool timeout"}
    return names.get(type(exc), "timeout")
