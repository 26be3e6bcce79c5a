"""Who /v1/verify's per-client budget counts against: the connecting peer unless it is a trusted proxy,
then the rightmost X-Forwarded-For hop that is not trusted; IPv6 clients by their /64."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from docfence.api.rate_limit import ClientAddress
from docfence.config import ConfigError, ServerConfig, VerificationConfig, load_settings

from .conftest import ApiEnv, api_env

TIGHT = VerificationConfig(public_base_url="https://v.example", organisation="X", requests_per_minute=6,
                           burst=2)
UNKNOWN = "/v1/verify/01UNKNOWNJOB000000000000000"


def _codes(env: ApiEnv, forwarded_for: str | None, n: int = 3) -> list[int]:
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for is not None else {}
    return [httpx.get(env.base_url + UNKNOWN, headers=headers).status_code for _ in range(n)]


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget(tmp_path: Path) -> None:
    server = ServerConfig(trusted_proxies=("127.0.0.0/8",))
    with api_env(tmp_path, verification=TIGHT, server=server) as env:
        assert _codes(env, "203.0.113.5") == [404, 404, 429]
        assert _codes(env, "203.0.113.6") == [404, 404, 429]  # another recipient behind the same proxy
        # a client forging hops left of what the proxy appended gains nothing: the rightmost counts
        assert _codes(env, "198.51.100.1, 203.0.113.5", n=1) == [429]
        # a chain of trusted proxies is skipped from the right
        assert _codes(env, "192.0.2.44, 127.0.0.9") == [404, 404, 429]


def test_forwarded_headers_are_ignored_unless_the_peer_is_trusted(tmp_path: Path) -> None:
    server = ServerConfig(trusted_proxies=("10.0.0.0/8",))  # the loopback peer is not one of them
    with api_env(tmp_path, verification=TIGHT, server=server) as env:
        assert _codes(env, "203.0.113.5", n=2) == [404, 404]
        assert _codes(env, "203.0.113.6", n=1) == [429]  # one budget: the peer's


def test_ipv6_clients_share_one_budget_per_64(tmp_path: Path) -> None:
    server = ServerConfig(trusted_proxies=("127.0.0.1",))
    with api_env(tmp_path, verification=TIGHT, server=server) as env:
        assert _codes(env, "2001:db8:1:2::1", n=2) == [404, 404]
        assert _codes(env, "2001:db8:1:2:ffff::9", n=1) == [429]  # same /64, another address
        assert _codes(env, "2001:db8:1:3::1", n=1) == [404]  # the next /64 is another client


@pytest.mark.parametrize(("peer", "hops", "key"), [
    ("127.0.0.1", [], "127.0.0.1"),
    ("::ffff:192.0.2.1", [], "192.0.2.1"),
    ("2001:db8::5", ["203.0.113.1"], "2001:db8::/64"),  # untrusted peer: its header is not read
    ("10.1.2.3", ["203.0.113.1, 10.9.9.9", "10.0.0.7"], "203.0.113.1"),  # repeated headers, in order
    ("10.1.2.3", ["not-an-ip"], "10.1.2.3"),  # garbage a proxy would not append: the proxy's budget
    ("10.1.2.3", [], "10.1.2.3"),
])
def test_client_key(peer: str, hops: list[str], key: str) -> None:
    assert ClientAddress(("10.0.0.0/8",)).key(peer, hops) == key


def test_trusted_proxies_setting_is_a_list_of_ips_or_cidrs(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[server]\ntrusted_proxies = ["10.0.0.0/8", "2001:db8::1"]\n')
    assert load_settings(good, env={}).server.trusted_proxies == ("10.0.0.0/8", "2001:db8::1")
    bad = tmp_path / "bad.toml"
    bad.write_text('[server]\ntrusted_proxies = ["proxy.internal"]\n')
    with pytest.raises(ConfigError, match=r"trusted_proxies entry 'proxy\.internal'"):
        load_settings(bad, env={})
    bad.write_text('[server]\ntrusted_proxies = "10.0.0.1"\n')
    with pytest.raises(ConfigError, match=r"\[server\].trusted_proxies"):
        load_settings(bad, env={})
