"""ProviderConfig: validated at construction, secrets never in repr, TOML-friendly loader."""

from __future__ import annotations

import dataclasses
import tomllib
from typing import Any

import pytest

from docfence.core.errors import ConfigError, ProviderError, all_codes
from docfence.providers import JsonPath, PollPolicy, ProviderConfig, Secret, docfence_preset, from_dict
from docfence.providers import errors as provider_errors


def base(**changes: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "name": "acme",
        "submit_url": "https://render.example/v2/jobs",
        "status_url": "https://render.example/v2/jobs/{id}",
        "running": {"pending", "working"},
        "succeeded": {"done"},
        "failed": {"error"},
        "result_url_path": "/links/download",
        "auth_secret": Secret("s3cr3t-value"),
    }
    settings.update(changes)
    return settings


def test_preset_matches_the_docfence_api() -> None:
    config = docfence_preset("http://127.0.0.1:8080/", "key-123")
    assert config.submit_url == "http://127.0.0.1:8080/v1/jobs"
    assert config.status_url == "http://127.0.0.1:8080/v1/jobs/{id}"
    assert config.result_url_template == "http://127.0.0.1:8080/v1/jobs/{id}/artifact"
    assert config.running == {"queued", "rendering"} and config.failed == {"failed", "canceled"}
    assert config.idempotency_header == "Idempotency-Key" and config.result_auth
    assert config.auth_headers() == {"Authorization": "Bearer key-123"}


def test_secret_never_in_repr_or_str() -> None:
    config = docfence_preset("http://127.0.0.1:8080", "key-123")
    assert "key-123" not in repr(config) and "key-123" not in str(config)
    assert "key-123" not in repr(Secret("key-123")) and "key-123" not in str(Secret("key-123"))
    assert "key-123" not in repr(dataclasses.asdict(config).get("auth_secret"))
    assert Secret("a") == Secret("a") and Secret("a") != Secret("b")


def test_config_is_frozen_and_sets_are_frozensets() -> None:
    config = ProviderConfig(**base(running=["pending", "working"]))
    assert config.running == frozenset({"pending", "working"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "changes",
    [
        {"name": "Bad Name"},
        {"submit_url": "ftp://render.example/jobs"},
        {"submit_url": "/relative"},
        {"submit_url": "https://user:pw@render.example/jobs"},
        {"status_url": "https://render.example/v2/jobs"},
        {"status_url": "https://render.example/{tenant}/{id}"},
        {"running": set()},
        {"running": "pending"},
        {"running": {"pending", "done"}},
        {"failed": {"error", ""}},
        {"result_url_path": None},
        {"result_url_template": "https://render.example/{id}/pdf"},
        {"result_url_path": "a..b"},
        {"status_path": ""},
        {"submit_style": "xml"},
        {"auth_header": "Bad Header"},
        {"auth_header": None},
        {"auth_scheme": "Bearer x"},
        {"idempotency_header": "Idem\nKey"},
        {"submit_max_attempts": 0},
        {"submit_max_attempts": True},
        {"max_redirects": 50},
        {"poll": {"initial_delay_s": 1}},
    ],
)
def test_invalid_configs_fail_at_construction(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ProviderConfig(**base(**changes))


@pytest.mark.parametrize(
    "changes",
    [
        {"initial_delay_s": 0},
        {"initial_delay_s": 5, "max_delay_s": 1},
        {"backoff_factor": 0.5},
        {"jitter_ratio": 1.0},
        {"retry_after_cap_s": float("inf")},
        {"max_consecutive_5xx": -1},
        {"max_consecutive_malformed": 1.5},
        {"initial_delay_s": "1"},
    ],
)
def test_invalid_poll_policies(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        PollPolicy(**changes)


def test_secret_rejects_header_injection() -> None:
    with pytest.raises(ConfigError):
        Secret("abc\r\nX-Evil: 1")
    with pytest.raises(ConfigError):
        Secret("  ")


def test_json_paths() -> None:
    doc = {"data": {"jobs": [{"id": "j-9"}], "a/b": {"~x": 1}}}
    assert JsonPath.parse("data.jobs.0.id").get(doc) == "j-9"
    assert JsonPath.parse("/data/jobs/0/id").get(doc) == "j-9"
    assert JsonPath.parse("/data/a~1b/~0x").get(doc) == 1
    for missing in ("data.jobs.1.id", "data.nope", "data.jobs.x"):
        with pytest.raises(LookupError):
            JsonPath.parse(missing).get(doc)
    for bad in ("", "/", "a.", "//a"):
        with pytest.raises(ConfigError):
            JsonPath.parse(bad)


TOML = """
name = "acme"
submit_url = "https://render.example/v2/jobs"
status_url = "https://render.example/v2/jobs/{id}"
running = ["pending", "working"]
succeeded = ["done"]
failed = ["error", "cancelled"]
job_id_path = "data.id"
status_path = "/data/status"
result_url_path = "data.download_url"
submit_style = "json"
auth_header = "X-Api-Key"
auth_scheme = ""
auth_env = "ACME_KEY"

[poll]
initial_delay_s = 2.0
max_consecutive_5xx = 5
"""


def test_from_toml_reads_the_secret_from_the_given_environment() -> None:
    data = tomllib.loads(TOML.replace('auth_scheme = ""\n', ""))
    config = from_dict(data, environ={"ACME_KEY": "k-from-env"})
    assert config.failed == {"error", "cancelled"} and config.poll.initial_delay_s == 2.0
    assert config.poll.max_consecutive_5xx == 5 and config.submit_style == "json"
    config = from_dict({**data, "auth_scheme": None}, environ={"ACME_KEY": "k-from-env"})
    assert config.auth_headers() == {"X-Api-Key": "k-from-env"}
    assert from_dict(data, secret="runtime").auth_headers() == {"X-Api-Key": "Bearer runtime"}


@pytest.mark.parametrize(
    ("data", "environ"),
    [
        ({"auth_env": "ACME_KEY"}, {}),
        ({"auth_env": "ACME_KEY"}, None),
        ({"api_key": "literal"}, {}),
        ({"auth_secret": "literal"}, {}),
        ({"surprise": 1}, {}),
        ({"poll": {"initial_delay": 1}}, {}),
        ({"poll": 3}, {}),
        ({"auth_scheme": ""}, {}),
    ],
)
def test_from_dict_rejects(data: dict[str, Any], environ: dict[str, str] | None) -> None:
    raw = tomllib.loads(TOML)
    raw.pop("auth_env")
    raw.pop("auth_scheme")
    with pytest.raises(ConfigError) as info:
        from_dict({**raw, **data}, environ=environ)
    assert "literal" not in str(info.value)


def test_from_dict_missing_required_is_config_error() -> None:
    with pytest.raises(ConfigError):
        from_dict({"name": "acme"})


def test_from_dict_docfence_preset() -> None:
    config = from_dict(
        {"preset": "docfence", "base_url": "http://127.0.0.1:9", "auth_env": "K", "poll": {"max_delay_s": 9}},
        environ={"K": "v"},
    )
    assert config.name == "docfence" and config.poll.max_delay_s == 9
    assert config.auth_headers() == {"Authorization": "Bearer v"}
    with pytest.raises(ConfigError):
        from_dict({"preset": "docfence", "base_url": "http://127.0.0.1:9"})
    with pytest.raises(ConfigError):
        from_dict({"preset": "other", "base_url": "http://127.0.0.1:9"}, secret="v")


def test_provider_errors_have_stable_unique_codes() -> None:
    classes = [
        c for c in vars(provider_errors).values() if isinstance(c, type) and issubclass(c, ProviderError)
    ]
    subclasses = [c for c in classes if c is not ProviderError]
    assert len(subclasses) == 9
    codes = [c.code for c in subclasses]
    assert len(set(codes)) == len(codes) and "provider_error" not in codes
    catalogue = all_codes()
    for cls in subclasses:
        assert cls.__doc__ and catalogue[cls.code] == cls().message
