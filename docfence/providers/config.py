"""Declarative, frozen configuration of one outside renderer reached over HTTP: where to submit, where
to read status, which status values mean what, how to authenticate, and the poll policy. Validated at
construction; secrets are held in `Secret` and never appear in repr, str or logs."""

from __future__ import annotations

import hmac
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal
from urllib.parse import urlsplit

from docfence.core.errors import ConfigError

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
_MISSING = object()


class Secret:
    """A credential. `reveal()` is the only way to read it; repr and str are masked."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError("a secret must be a non-empty string")
        if any(ch in value for ch in "\r\n\x00"):
            raise ConfigError("a secret must not contain line breaks or NUL")
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value, other._value)

    def __hash__(self) -> int:
        return hash(Secret)


@dataclass(frozen=True)
class JsonPath:
    """Where a value sits in a JSON answer: a dotted path (`data.job.id`, digits index lists) or an
    RFC 6901 JSON pointer (`/data/job/id`)."""

    text: str
    parts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> JsonPath:
        if not isinstance(text, str) or not text or text == "/":
            raise ConfigError(f"invalid JSON path {text!r}")
        if text.startswith("/"):
            raw = text[1:].split("/")
            parts = tuple(p.replace("~1", "/").replace("~0", "~") for p in raw)
        else:
            parts = tuple(text.split("."))
        if any(not p for p in parts):
            raise ConfigError(f"invalid JSON path {text!r}: empty segment")
        return cls(text, parts)

    def get(self, doc: Any) -> Any:
        """The value at this path; raises LookupError when absent."""
        node = doc
        for part in self.parts:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise LookupError(self.text)
        return node


def _number(name: str, value: Any, *, minimum: float, inclusive: bool = True) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum or (not inclusive and value == minimum):
        bound = ">=" if inclusive else ">"
        raise ConfigError(f"{name} must be a finite number {bound} {minimum}, got {value!r}")


def _count(name: str, value: Any, *, minimum: int, maximum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise ConfigError(f"{name} must be an integer in [{minimum}, {maximum}], got {value!r}")


@dataclass(frozen=True, kw_only=True)
class PollPolicy:
    """How the bounded poller paces itself. Counts are *tolerated* consecutive bad answers: one more
    ends the poll (max_consecutive_5xx=3: the 4th 5xx/transport error in a row is terminal)."""

    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0
    backoff_factor: float = 2.0
    jitter_ratio: float = 0.2  # each wait is reduced by a random fraction up to this; never increased
    retry_after_cap_s: float = 60.0
    max_consecutive_5xx: int = 3  # transport errors count here too
    max_consecutive_malformed: int = 1  # one repeat: a proxy error page can be transient

    def __post_init__(self) -> None:
        _number("initial_delay_s", self.initial_delay_s, minimum=0, inclusive=False)
        _number("max_delay_s", self.max_delay_s, minimum=self.initial_delay_s)
        _number("backoff_factor", self.backoff_factor, minimum=1)
        _number("jitter_ratio", self.jitter_ratio, minimum=0)
        if self.jitter_ratio >= 1:
            raise ConfigError("jitter_ratio must be < 1")
        _number("retry_after_cap_s", self.retry_after_cap_s, minimum=0, inclusive=False)
        _count("max_consecutive_5xx", self.max_consecutive_5xx, minimum=0, maximum=100)
        _count("max_consecutive_malformed", self.max_consecutive_malformed, minimum=0, maximum=100)


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an absolute URL, default ports filled in."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, (parts.hostname or "").lower(), port


def _check_url(name: str, url: Any, *, template: bool = False) -> None:
    if not isinstance(url, str):
        raise ConfigError(f"{name} must be a string")
    probe = url.replace("{id}", "x") if template else url
    if template and "{id}" not in url:
        raise ConfigError(f"{name} must contain {{id}}")
    if "{" in probe or "}" in probe:
        raise ConfigError(f"{name} may contain no placeholder other than {{id}}")
    try:
        parts = urlsplit(probe)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(f"{name} is not a valid URL") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an absolute http(s) URL")
    if parts.username or parts.password or parts.fragment:
        raise ConfigError(f"{name} must not carry credentials or a fragment")


def _check_states(running: frozenset[str], succeeded: frozenset[str], failed: frozenset[str]) -> None:
    for label, values in (("running", running), ("succeeded", succeeded), ("failed", failed)):
        if not values or not all(isinstance(v, str) and v for v in values):
            raise ConfigError(f"{label} must be a non-empty set of non-empty strings")
    if running & succeeded or running & failed or succeeded & failed:
        raise ConfigError("running, succeeded and failed status values must not overlap")


@dataclass(frozen=True, kw_only=True)
class ProviderConfig:
    """One outside renderer. Result location: exactly one of `result_url_path` (a URL inside the status
    JSON, typically presigned) or `result_url_template` (an API endpoint, e.g. one that redirects).
    `result_auth`: send the API credential on the *first* hop of a download, and only when that hop
    is on an API origin. Redirect targets never receive it."""

    name: str
    submit_url: str
    status_url: str  # template with {id}; the id is percent-encoded before substitution
    running: frozenset[str]
    succeeded: frozenset[str]
    failed: frozenset[str]
    job_id_path: str = "id"
    status_path: str = "state"
    reason_path: str | None = None
    result_url_path: str | None = None
    result_url_template: str | None = None
    result_auth: bool = False
    submit_style: Literal["multipart", "json"] = "multipart"
    file_field: str = "file"  # multipart field, or JSON key holding the base64 document
    auth_header: str | None = "Authorization"
    auth_scheme: str | None = "Bearer"  # prefix of the header value; None sends the secret as is
    auth_secret: Secret | None = field(default=None, repr=False)
    idempotency_header: str | None = "Idempotency-Key"
    submit_max_attempts: int = 3
    max_status_bytes: int = 1 << 20
    max_result_bytes: int = 256 << 20
    max_redirects: int = 5
    poll: PollPolicy = field(default_factory=PollPolicy)

    def __post_init__(self) -> None:
        for name in ("running", "succeeded", "failed"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise ConfigError(f"{name} must be a set of strings")
            object.__setattr__(self, name, frozenset(value))
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError("name must match [a-z0-9][a-z0-9_-]{0,63}")
        _check_url("submit_url", self.submit_url)
        _check_url("status_url", self.status_url, template=True)
        _check_states(self.running, self.succeeded, self.failed)
        self._check_result()
        self._check_http()
        for name in ("job_id_path", "status_path", "reason_path", "result_url_path"):
            if getattr(self, name) is not None:
                JsonPath.parse(getattr(self, name))

    def _check_result(self) -> None:
        if (self.result_url_path is None) == (self.result_url_template is None):
            raise ConfigError("set exactly one of result_url_path and result_url_template")
        if self.result_url_template is not None:
            _check_url("result_url_template", self.result_url_template, template=True)
        if not isinstance(self.result_auth, bool):
            raise ConfigError("result_auth must be a boolean")

    def _check_http(self) -> None:
        if self.submit_style not in ("multipart", "json"):
            raise ConfigError("submit_style must be 'multipart' or 'json'")
        if not isinstance(self.file_field, str) or not self.file_field:
            raise ConfigError("file_field must be a non-empty string")
        for name in ("auth_header", "idempotency_header"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not _HEADER.match(value)):
                raise ConfigError(f"{name} is not a valid HTTP header name")
        if self.auth_scheme is not None and not (
            isinstance(self.auth_scheme, str) and _HEADER.match(self.auth_scheme)
        ):
            raise ConfigError("auth_scheme must be a single token such as 'Bearer'")
        if self.auth_secret is not None:
            if not isinstance(self.auth_secret, Secret):
                raise ConfigError("auth_secret must be a Secret")
            if self.auth_header is None:
                raise ConfigError("auth_secret needs auth_header")
        _count("submit_max_attempts", self.submit_max_attempts, minimum=1, maximum=10)
        _count("max_status_bytes", self.max_status_bytes, minimum=1, maximum=1 << 30)
        _count("max_result_bytes", self.max_result_bytes, minimum=1, maximum=1 << 40)
        _count("max_redirects", self.max_redirects, minimum=0, maximum=10)
        if not isinstance(self.poll, PollPolicy):
            raise ConfigError("poll must be a PollPolicy")

    def api_origins(self) -> frozenset[tuple[str, str, int]]:
        """The origins that may receive the API credential."""
        urls = [self.submit_url, self.status_url.replace("{id}", "x")]
        if self.result_url_template is not None:
            urls.append(self.result_url_template.replace("{id}", "x"))
        return frozenset(origin(u) for u in urls)

    def auth_headers(self) -> dict[str, str]:
        """The credential header, or nothing when the provider needs none."""
        if self.auth_secret is None or self.auth_header is None:
            return {}
        value = self.auth_secret.reveal()
        return {self.auth_header: f"{self.auth_scheme} {value}" if self.auth_scheme else value}


def docfence_preset(base_url: str, api_key: str, **overrides: Any) -> ProviderConfig:
    """docfence's own API as a provider: POST /v1/jobs (multipart `file`, optional form field `policy`),
    GET /v1/jobs/{id} (`state`), GET /v1/jobs/{id}/artifact answering a redirect to a signed URL."""
    base = base_url.rstrip("/")
    settings: dict[str, Any] = {
        "name": "docfence",
        "submit_url": f"{base}/v1/jobs",
        "status_url": f"{base}/v1/jobs/{{id}}",
        "running": {"queued", "rendering"},
        "succeeded": {"succeeded"},
        "failed": {"failed", "canceled"},
        "job_id_path": "id",
        "status_path": "state",
        "reason_path": "error.code",
        "result_url_template": f"{base}/v1/jobs/{{id}}/artifact",
        "result_auth": True,
        "submit_style": "multipart",
        "file_field": "file",
        "auth_header": "Authorization",
        "auth_scheme": "Bearer",
        "auth_secret": Secret(api_key),
        "idempotency_header": "Idempotency-Key",
    }
    settings.update(overrides)
    return ProviderConfig(**settings)


_FIELDS = {f.name for f in fields(ProviderConfig)} - {"auth_secret", "poll"}
_POLL_FIELDS = {f.name for f in fields(PollPolicy)}


def _unknown(keys: Iterable[str], allowed: set[str], where: str) -> None:
    extra = sorted(set(keys) - allowed)
    if extra:
        raise ConfigError(f"unknown {where} setting(s): {', '.join(extra)}")


def from_dict(
    data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None, secret: str | None = None
) -> ProviderConfig:
    """Build a config from a mapping (e.g. a parsed TOML table). The credential is never read from the
    mapping itself: `auth_env` names an environment variable looked up in `environ` (docfence.config
    passes os.environ), or `secret` is passed at runtime. `preset = "docfence"` with `base_url` starts
    from docfence_preset. Unknown keys are errors, so typos fail at start-up."""
    data = dict(data)
    if {"auth_secret", "api_key", "secret", "token"} & data.keys():
        raise ConfigError("secrets do not belong in config files; use auth_env or pass the secret")
    env_name = data.pop("auth_env", None)
    resolved = _resolve_secret(env_name, environ, secret)
    poll_data = data.pop("poll", {})
    if not isinstance(poll_data, Mapping):
        raise ConfigError("poll must be a table")
    _unknown(poll_data.keys(), _POLL_FIELDS, "poll")
    settings: dict[str, Any] = {"poll": PollPolicy(**poll_data)}
    preset = data.pop("preset", None)
    if preset is not None:
        if preset != "docfence" or resolved is None:
            raise ConfigError("preset must be 'docfence' and needs a secret")
        base_url = data.pop("base_url", None)
        if not isinstance(base_url, str):
            raise ConfigError("preset 'docfence' needs base_url")
        _unknown(data.keys(), _FIELDS, "provider")
        return docfence_preset(base_url, resolved.reveal(), **data, **settings)
    _unknown(data.keys(), _FIELDS, "provider")
    try:
        return ProviderConfig(**data, **settings, auth_secret=resolved)
    except TypeError as exc:  # a required key is missing
        raise ConfigError(f"incomplete provider config: {exc}") from exc


def _resolve_secret(env_name: Any, environ: Mapping[str, str] | None, secret: str | None) -> Secret | None:
    if secret is not None:
        return Secret(secret)
    if env_name is None:
        return None
    if not isinstance(env_name, str) or not env_name:
        raise ConfigError("auth_env must name an environment variable")
    if environ is None or not environ.get(env_name):
        raise ConfigError(f"environment variable {env_name} is not set")
    return Secret(environ[env_name])
