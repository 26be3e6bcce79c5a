"""Sending one webhook request without server-side request forgery: resolve the receiver's host, refuse
loopback, private, link-local, site-local, multicast, reserved and unspecified addresses (also those
embedded in ::ffff: and 6to4 2002::/16 addresses) unless the allow-list names them, then connect to the
very address that was checked (no second lookup). No redirects, bounded connect and read timeouts, a
total time limit per attempt (a receiver cannot trickle its answer forever), and at most
BODY_PREFIX_BYTES of the answer are read."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from docfence.core.clock import Clock, SystemClock, monotonic

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


def _resolve_within(resolver: Resolver, host: str, port: int, seconds: float) -> Sequence[str]:
    """`resolver(host, port)` waited for at most `seconds` (TimeoutError after): run in a daemon thread,
    so a slow DNS server holds the dispatcher no longer than the attempt allows (the lookup itself,
    which cannot be interrupted, ends in the background at the resolver's own timeout)."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["addresses"] = resolver(host, port)
        except BaseException as exc:  # handed to the caller, re-raised there
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="webhook-resolve", daemon=True).start()
    if not done.wait(seconds):
        raise TimeoutError
    if "error" in outcome:
        raise outcome["error"]
    return outcome["addresses"]  # type: ignore[no-any-return]


def _special(ip: IpAddress) -> bool:
    embedded = getattr(ip, "ipv4_mapped", None) or getattr(ip, "sixtofour", None)
    if embedded is not None:  # ::ffff:a.b.c.d and 6to4 (2002::/16) reach the IPv4 they embed
        return _special(embedded)
    return (not ip.is_global or ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast
            or ip.is_unspecified or ip.is_reserved or getattr(ip, "is_site_local", False))


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
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced "[" in the host: not a URL at all
        raise DestinationRefused("the URL is not a valid http(s) URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DestinationRefused("the URL must be http:// or https:// with a host")
    if parts.username is not None or parts.password is not None or parts.fragment:
        raise DestinationRefused("the URL must carry no user name, password or #fragment")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DestinationRefused("the URL's port is not a number in 1-65535") from None
    if not _valid_host(parts.hostname):
        raise DestinationRefused("the URL's host is not a valid host name")
    return parts.scheme, parts.hostname, port


def _valid_host(host: str) -> bool:
    """An address, or a name the resolver can take: getaddrinfo raises UnicodeError (not OSError) for
    an empty or over-long label, which must be refused here rather than met at delivery."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    try:
        host.encode("idna")
    except UnicodeError:
        return False
    return True


@dataclass(frozen=True)
class Timeouts:
    connect_s: float
    read_s: float
    total_s: float  # the whole attempt, however slowly a receiver trickles its answer


class _Deadline:
    """Bounds every socket operation of one attempt by what is left of its total time."""

    def __init__(self, seconds: float) -> None:
        self.until = monotonic() + seconds

    @property
    def passed(self) -> bool:
        return monotonic() >= self.until

    def bound(self, timeout: float | None) -> float:
        left = self.until - monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the attempt's total time ran out")
        return left if timeout is None else min(timeout, left)


class _BoundedStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self.stream, self.deadline = stream, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, self.deadline.bound(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, self.deadline.bound(timeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        tls = self.stream.start_tls(ssl_context, server_hostname, self.deadline.bound(timeout))
        return _BoundedStream(tls, self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class _PinnedBackend(httpcore.SyncBackend):
    """Connects to the address the policy checked, whatever the URL's host resolves to now (no second
    lookup for DNS to answer differently); the URL keeps its host for the Host header, TLS server name
    and certificate check."""

    def __init__(self, address: str, deadline: _Deadline) -> None:
        self.address, self.deadline = address, deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        stream = super().connect_tcp(self.address, port, timeout=self.deadline.bound(timeout),
                                     local_address=local_address, socket_options=socket_options)
        return _BoundedStream(stream, self.deadline)


class _PinnedTransport(httpx.HTTPTransport):
    """httpx's transport (its request and error mapping) over a pool with the pinned backend."""

    def __init__(self, address: str, deadline: _Deadline, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool.close()
        # httpx builds its pool privately; replacing it is the one way to give it a network backend
        self._pool = httpcore.ConnectionPool(ssl_context=ssl_context, max_connections=1,
                                             network_backend=_PinnedBackend(address, deadline))


class GuardedTransport:
    """POSTs one body to a receiver under the address policy (`send` is the one I/O seam)."""

    def __init__(self, policy: AddressPolicy, timeouts: Timeouts, *, resolver: Resolver = resolve,
                 clock: Clock | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        """`ssl_context`: whom HTTPS receivers' certificates must chain to (default: the public CAs)."""
        self.policy, self.timeouts, self.resolver = policy, timeouts, resolver
        self.clock = clock or SystemClock()
        # built once: loading the CA bundle costs tens of milliseconds, more than a local delivery
        self.ssl_context = ssl_context or httpx.create_ssl_context()

    def send(self, url: str, body: bytes, headers: Mapping[str, str]) -> Sent:
        """Raises DestinationRefused before any connection for a refused URL or address."""
        _, host, port = check_url(url)
        started = self.clock.monotonic()
        deadline = _Deadline(self.timeouts.total_s)  # the lookup counts in the attempt's total time
        try:
            addresses = _resolve_within(self.resolver, host, port,
                                        min(self.timeouts.connect_s, self.timeouts.total_s))
        except TimeoutError:
            return Sent(None, self._ms(started), f"cannot resolve {host} (timed out)")
        except OSError as exc:
            return Sent(None, self._ms(started), f"cannot resolve {host} ({exc.strerror or exc})")
        except ValueError as exc:  # UnicodeError included: a name the resolver cannot encode
            return Sent(None, self._ms(started), f"cannot resolve {host} ({type(exc).__name__})")
        ip = self.policy.check(host, addresses)
        timeout = httpx.Timeout(connect=self.timeouts.connect_s, read=self.timeouts.read_s,
                                write=self.timeouts.read_s, pool=self.timeouts.connect_s)
        transport = _PinnedTransport(str(ip), deadline, self.ssl_context)
        try:
            with (httpx.Client(transport=transport, timeout=timeout, follow_redirects=False,
                               trust_env=False) as client,
                  client.stream("POST", url, content=body, headers=dict(headers)) as response):
                prefix = _read_prefix(response)
        except httpx.TimeoutException as exc:
            limit = f"attempt time limit ({self.timeouts.total_s:g} s)"
            return Sent(None, self._ms(started), limit if deadline.passed else _timeout_name(exc))
        except httpx.HTTPError as exc:
            return Sent(None, self._ms(started), f"{type(exc).__name__}: {str(exc)[:200]}")
        except (httpx.InvalidURL, ValueError) as exc:  # not HTTPError subclasses
            return Sent(None, self._ms(started), f"invalid request: {type(exc).__name__}")
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
