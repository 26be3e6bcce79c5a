"""Typed, frozen settings per component; the only place that reads the environment or a TOML file.

Precedence: defaults < TOML file (DOCFENCE_CONFIG or --config) < DOCFENCE_* environment variables.
Every value is validated here, so a bad setting fails at start-up with a clear message.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from docfence.core.errors import ConfigError
from docfence.core.marks import MarkRules, image_uri
from docfence.core.policy import (
    VALIDATION_LEVELS,
    JobPolicy,
    Kind,
    Limits,
    Mode,
    SanitizePolicy,
    SigningSpec,
    VerificationSpec,
    WatermarkSpec,
)

DEFAULT_DATABASE_URL = "sqlite:///docfence-data/docfence.db"
DEFAULT_STORAGE_URL = "file:docfence-data/objects"


@dataclass(frozen=True)
class DocumentClass:
    """Defaults for a class of documents; `max_deadline_s` bounds what a caller may ask for."""

    name: str
    mode: Mode = Mode.VECTOR
    dpi: int = 150
    deadline_s: float = 600.0
    max_deadline_s: float = 3600.0
    max_attempts: int = 3
    retention_s: float = 30 * 86400.0
    region: str = "local"
    watermark: WatermarkSpec = field(default_factory=WatermarkSpec)
    sanitize: SanitizePolicy = field(default_factory=SanitizePolicy)  # default: strip (leaves the org)
    validation: str = "standard"  # standard | exhaustive (see JobPolicy.validation)
    limits: dict[str, Any] = field(default_factory=dict)  # per-class overrides of [limits], e.g. budgets
    # further marks, limits on a job's marks, fields allowed, time zone of {date}, logos (core/marks.py)
    mark_rules: MarkRules = field(default_factory=MarkRules)
    verification: VerificationSpec | None = None  # [classes.NAME.verification]: a QR verification code
    signing: SigningSpec | None = None  # [classes.NAME.signing]: a PAdES signature with [signing]'s key

    def __post_init__(self) -> None:
        if not 0 < self.deadline_s <= self.max_deadline_s:
            raise ConfigError(f"deadline_s={self.deadline_s:g}: must be in (0, max_deadline_s="
                              f"{self.max_deadline_s:g}] for class {self.name}")
        if self.validation not in VALIDATION_LEVELS:
            raise ConfigError(f"validation={self.validation!r}: allowed: {', '.join(VALIDATION_LEVELS)}"
                              f" for class {self.name}")
        unknown = sorted(set(self.limits) - {f.name for f in fields(Limits)})
        if unknown:
            raise ConfigError(f"limits.{unknown[0]}: unknown limit for class {self.name} (allowed: "
                              f"{', '.join(f.name for f in fields(Limits))})")
        Limits(**self.limits)  # each override is checked at start-up, not at the first job


@dataclass(frozen=True)
class WorkerConfig:
    lease_ttl_s: float = 30.0
    heartbeat_interval_s: float = 5.0
    batch: int = 1  # rendering is heavy: a claimed-but-waiting job only delays its rescue
    poll_interval_s: float = 1.0
    shutdown_grace_s: float = 10.0
    reconcile_in_process: bool = True
    reconcile_interval_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_interval_s < self.lease_ttl_s / 2:
            raise ConfigError(f"heartbeat_interval_s={self.heartbeat_interval_s!r}: must be positive and "
                              f"under half of lease_ttl_s={self.lease_ttl_s!r}")
        for name in ("batch", "poll_interval_s", "reconcile_interval_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be positive")


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
    max_pending_connections: int = 256  # connections still sending their headers
    max_concurrent_auth: int = 8  # key look-ups in flight; more wait without holding a thread
    docs: bool = True  # /docs: Swagger UI served from the package (no CDN); /openapi.json is always on
    # reverse proxies (IPs or CIDRs) whose X-Forwarded-For is believed, for per-client limits on routes
    # without a key; empty: the connecting address is the client, whatever the headers say
    trusted_proxies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for entry in self.trusted_proxies:
            if not (isinstance(entry, str) and _is_network(entry)):
                raise ConfigError(f"trusted_proxies entry {entry!r}: must be an IP address or a CIDR block "
                                  "such as 10.0.0.0/8")
        for name in ("header_timeout_s", "body_idle_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not 0 < getattr(self, name) <= 86400:
                raise ConfigError(f"server.{name} must be in (0, 86400]")
        for name in ("max_header_bytes", "max_json_body_bytes", "max_pending_connections",
                     "max_concurrent_auth"):
            if isinstance(getattr(self, name), bool) or not 0 < getattr(self, name) <= 2**40:
                raise ConfigError(f"server.{name} must be a positive integer")


@dataclass(frozen=True)
class VerificationConfig:
    """`[verification]`: where recipients check a document, and the name they are shown as its issuer."""

    public_base_url: str = ""  # e.g. https://verify.example.org; the QR code encodes URLs under it
    organisation: str = ""  # the issuer's name GET /v1/verify/{job_id} answers with
    requests_per_minute: int = 30  # per client address, on /v1/verify (no key there)
    burst: int = 10

    def __post_init__(self) -> None:
        if not 0 < self.requests_per_minute <= 100_000 or not 0 < self.burst <= 10_000:
            raise ConfigError("requests_per_minute and burst must be positive (at most 100000 and 10000)")
        url = self.public_base_url
        if url and (not url.startswith(("https://", "http://")) or any(c in url for c in "?# ")
                    or len(url) > 200):
            raise ConfigError(f"public_base_url={url!r}: must be an http(s) URL of at most 200 characters "
                              "without a query or fragment")
        if len(self.organisation) > 200:
            raise ConfigError("organisation must be at most 200 characters")


@dataclass(frozen=True)
class SigningConfig:
    """`[signing]`: the organisation's PKCS#12 file for signed outputs (not the secret of signed URLs)."""

    pkcs12: str = ""  # path to the .p12/.pfx file: private key, certificate and its chain
    pkcs12_password: str = ""  # or DOCFENCE_SIGNING_PKCS12_PASSWORD

    def __repr__(self) -> str:  # the password never reaches a log or a traceback
        return f"SigningConfig(pkcs12={self.pkcs12!r})"


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
    if not (name_like or (isinstance(host, str) and _is_network(host))):
        raise ConfigError(f"allow_hosts entry {host!r}: must be a host name, an IP address or a CIDR "
                          "block such as 10.0.0.0/8")


def _is_network(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    storage_url: str = DEFAULT_STORAGE_URL
    regions: dict[str, str] = field(default_factory=dict)  # region -> storage URL; empty: {"local": storage}
    default_class: str = "default"
    classes: dict[str, DocumentClass] = field(default_factory=dict)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    limits: Limits = field(default_factory=Limits)
    server: ServerConfig = field(default_factory=ServerConfig)
    webhooks: WebhooksConfig = field(default_factory=WebhooksConfig)
    # secrets, never printed: signed download URLs' key, and the Fernet key sealing PDF passwords at
    # rest (each generated per data folder when empty)
    signing_secret: str = field(default="", repr=False)
    password_key: str = field(default="", repr=False)
    signed_url_ttl_s: float = 300.0
    max_upload_bytes: int = 100 * 1024 * 1024
    reconcile_batch: int = 100
    # the reconciler leaves an ended attempt's staged object alone this long (see ReconcileConfig)
    staging_grace_s: float = 60.0
    report_processors: tuple[str, ...] = ()  # outside renderers report requests may name
    log_level: str = "INFO"
    # where serve, worker and reconcile of one host share their counters (Prometheus multi-process
    # files); empty: see docfence.observability.multiproc.metrics_dir
    metrics_dir: str = ""
    verification: VerificationConfig = field(default_factory=VerificationConfig)
    signing: SigningConfig = field(default_factory=SigningConfig)

    def __post_init__(self) -> None:
        if not self.database_url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ConfigError("DOCFENCE_DATABASE_URL must be sqlite:///path or postgresql://...")
        if not self.storage_url.startswith(("file:", "s3://")):
            raise ConfigError("DOCFENCE_STORAGE_URL must be file:///dir or s3://bucket/prefix")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ConfigError("DOCFENCE_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        if not 0 <= self.staging_grace_s <= 86400:
            raise ConfigError("DOCFENCE_STAGING_GRACE_S must be in [0, 86400]")
        if self.default_class not in self.all_classes():
            raise ConfigError(f"default_class {self.default_class!r} is not a configured class")
        for cls in self.all_classes().values():
            if cls.verification is not None and not self.verification.public_base_url:
                raise ConfigError(f"[classes.{cls.name}.verification] needs [verification] public_base_url")
            if cls.signing is not None and not self.signing.pkcs12:
                raise ConfigError(f"[classes.{cls.name}.signing] needs [signing] pkcs12 (the key file)")

    def data_folder(self) -> Path | None:
        """The local folder beside the data (the SQLite file's, else a file:// store's parent) where
        generated secrets are kept; None when both database and storage are remote."""
        if self.database_url.startswith("sqlite:///"):
            return Path(self.database_url[len("sqlite:///") :]).parent
        if self.storage_url.startswith("file:"):
            return Path(self.storage_url[len("file:") :].removeprefix("//")).parent
        return None

    def all_classes(self) -> dict[str, DocumentClass]:
        return self.classes or {"default": DocumentClass("default")}

    def region_urls(self) -> dict[str, str]:
        return dict(self.regions) or {"local": self.storage_url}

    def document_class(self, name: str | None) -> DocumentClass:
        name = name or self.default_class
        try:
            return self.all_classes()[name]
        except KeyError:
            raise ConfigError(f"document_class={name!r}: unknown class (configured: "
                              f"{', '.join(sorted(self.all_classes()))})", field="document_class") from None

    def policy_for(self, class_name: str | None, *, mode_override: str | None = None,
                   **overrides: Any) -> JobPolicy:
        """The frozen policy a new job of this class gets (the caller may only tighten the deadline)."""
        cls = self.document_class(class_name)
        asked = overrides.pop("deadline_s", None)
        deadline = cls.deadline_s if asked is None else float(asked)
        if not 0 < deadline <= cls.max_deadline_s:
            raise ConfigError(f"deadline_s={deadline:g}: must be in (0, {cls.max_deadline_s:g}] seconds for "
                              f"class {cls.name} (its max_deadline_s)", field="deadline_s")
        base = JobPolicy(
            kind=Kind.WATERMARK, document_class=cls.name, mode=Mode(mode_override or cls.mode),
            dpi=cls.dpi, watermark=cls.watermark, deadline_s=deadline, lease_ttl_s=self.worker.lease_ttl_s,
            max_attempts=cls.max_attempts, region=cls.region, retention_s=cls.retention_s,
            limits=replace(self.limits, **cls.limits) if cls.limits else self.limits,
            sanitize=cls.sanitize,
            validation=cls.validation,
            verification=cls.verification,
            signing=cls.signing,
            marks=cls.mark_rules.marks, fields={},  # fields: filled at submission (service) or left empty
        )
        return base.evolve(**overrides) if overrides else base


_ENV = {
    "DOCFENCE_DATABASE_URL": ("database_url", str),
    "DOCFENCE_STORAGE_URL": ("storage_url", str),
    "DOCFENCE_SIGNING_SECRET": ("signing_secret", str),
    "DOCFENCE_PASSWORD_KEY": ("password_key", str),
    "DOCFENCE_DEFAULT_CLASS": ("default_class", str),
    "DOCFENCE_MAX_UPLOAD_BYTES": ("max_upload_bytes", int),
    "DOCFENCE_LOG_LEVEL": ("log_level", str),
    "DOCFENCE_STAGING_GRACE_S": ("staging_grace_s", float),
    "PROMETHEUS_MULTIPROC_DIR": ("metrics_dir", str),  # prometheus_client's own name, honoured as is
    "DOCFENCE_METRICS_DIR": ("metrics_dir", str),  # later: wins over PROMETHEUS_MULTIPROC_DIR
}
_WORKER_ENV = {
    "DOCFENCE_LEASE_TTL_S": "lease_ttl_s",
    "DOCFENCE_HEARTBEAT_INTERVAL_S": "heartbeat_interval_s",
    "DOCFENCE_WORKER_BATCH": "batch",
    "DOCFENCE_POLL_INTERVAL_S": "poll_interval_s",
    "DOCFENCE_RECONCILE_INTERVAL_S": "reconcile_interval_s",
    "DOCFENCE_SHUTDOWN_GRACE_S": "shutdown_grace_s",
}


@dataclass(frozen=True)
class ClientSettings:
    """The command-line client's settings: where the API is and which key to present."""

    url: str = "http://127.0.0.1:8080"
    api_key: str = ""


def load_client_settings(env: dict[str, str] | None = None) -> ClientSettings:
    env = dict(os.environ if env is None else env)
    return ClientSettings(url=env.get("DOCFENCE_URL") or ClientSettings.url,
                          api_key=env.get("DOCFENCE_API_KEY", ""))


def admin_database_url(env: dict[str, str] | None = None) -> str:
    """A PostgreSQL URL allowed to create databases (benchmarks and tests make throwaway ones)."""
    env = dict(os.environ if env is None else env)
    return env.get("DOCFENCE_TEST_PG_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"


def environment() -> dict[str, str]:
    """A copy of the process environment, for settings that name variables (e.g. provider keys)."""
    return dict(os.environ)


# variables a sandbox zygote (and so every render process) must not inherit: credentials by name
_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSW|CREDENTIAL|DATABASE_URL|STORAGE_URL", re.IGNORECASE)


def sandbox_environment() -> dict[str, str]:
    """The environment for a sandbox zygote: this process's, minus every variable whose name marks a
    credential (DOCFENCE_PASSWORD_KEY, DOCFENCE_SIGNING_SECRET, DOCFENCE_SIGNING_PKCS12_PASSWORD,
    DOCFENCE_DATABASE_URL, AWS_SECRET_ACCESS_KEY, provider keys...): a render process that a hostile
    document took over reads its own environment first."""
    return {name: value for name, value in os.environ.items() if not _SECRET_NAME.search(name)}


def load_settings(path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> Settings:
    """Build Settings from an optional TOML file and the DOCFENCE_* environment.

    Every ConfigError raised here is one line that names the setting as the user wrote it (the
    variable, `--config FILE`'s `[section].key`), the value, and what is allowed."""
    env = dict(os.environ if env is None else env)
    data = _read_toml(path or env.get("DOCFENCE_CONFIG"))
    try:
        return _build(data, env)
    except (TypeError, ValueError) as exc:  # a constructor check this loader did not anticipate
        raise ConfigError(f"invalid configuration: {exc}") from exc


def load_limits(path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> Limits:
    """Only the `[limits]` of the configuration file (DOCFENCE_CONFIG), the defaults without one: for
    local commands (`docfence watermark`) that use neither the database nor storage, so a setting of
    theirs cannot stop them."""
    env = dict(os.environ if env is None else env)
    table = _read_toml(path or env.get("DOCFENCE_CONFIG")).get("limits", {})
    limits: Limits = _section(Limits, "[limits]", table)
    return limits


def _read_toml(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        return tomllib.loads(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"DOCFENCE_CONFIG={str(path)!r}: cannot read the file ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"DOCFENCE_CONFIG={str(path)!r}: not valid TOML ({exc})") from exc


#: Allowed values of top-level settings, checked with the name the user wrote before Settings exists.
_ALLOWED: dict[str, tuple[Any, str]] = {
    "database_url": (lambda v: isinstance(v, str) and v.startswith(("sqlite:///", "postgresql://",
                                                                    "postgres://")),
                     "allowed: sqlite:///relative.db, sqlite:////abs/path.db or postgresql://user@host:5432/db"),
    "storage_url": (lambda v: isinstance(v, str) and v.startswith(("file:", "s3://")),
                    "allowed: file:///abs/dir, file:rel/dir or s3://bucket/prefix"),
    "log_level": (lambda v: isinstance(v, str) and v.upper() in ("DEBUG", "INFO", "WARNING", "ERROR",
                                                                  "CRITICAL"),
                  "allowed: DEBUG, INFO, WARNING, ERROR or CRITICAL"),
}
_SETTING_TYPES = {"int": int, "float": float, "str": str, "bool": bool}
_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}


def _invalid(label: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{label}={value!r}: {allowed}")


def _typed(label: str, value: Any, type_name: str) -> Any:
    """`value` checked against a simple annotation (int, float, str, bool); others pass through."""
    want = _SETTING_TYPES.get(type_name.split(" |")[0].strip())
    if want is None:
        return value
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        raise _invalid(label, value, f"must be {_TYPE_WORDS[type_name.split(' |')[0].strip()]}")
    return value


def _from_env(var: str, raw: str, type_name: str) -> Any:
    """An environment variable's text as `type_name`, or a ConfigError naming the variable."""
    try:
        return {"int": int, "float": float}.get(type_name, str)(raw)
    except ValueError:
        raise _invalid(var, raw, f"must be {_TYPE_WORDS.get(type_name, type_name)}") from None


def _section(cls: type, label: str, table: Any, **extra: Any) -> Any:
    """Build the frozen config `cls` from a TOML table; unknown keys and wrong types name `label`.key."""
    if not isinstance(table, dict):
        raise _invalid(label, table, "must be a table")
    known = {f.name: str(f.type) for f in fields(cls) if f.name not in extra}
    for key in table:
        if key not in known:
            raise ConfigError(f"{label}: unknown key {key!r} (allowed: {', '.join(sorted(known))})")
    values = {key: _typed(f"{label}.{key}", value, known[key]) for key, value in table.items()}
    try:
        return cls(**extra, **values)
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc.message}") from None


def _build(data: dict[str, Any], env: dict[str, str]) -> Settings:
    data = dict(data)
    builtin = data.pop("builtin_classes", True)
    if not isinstance(builtin, bool):
        raise _invalid("builtin_classes", builtin, "must be true or false")
    known = {f.name: str(f.type) for f in fields(Settings)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        top = sorted({*known, "builtin_classes"} - {"classes", "worker", "limits", "server", "webhooks",
                                                    "verification", "signing"})
        raise ConfigError(f"unknown setting {unknown[0]!r} (allowed top-level keys: {', '.join(top)}; "
                          "tables: [classes.NAME], [worker], [limits], [server], [webhooks], [verification], "
                          "[signing])")
    sources = {name: name for name in data}
    worker_table = data.pop("worker", {})
    limits = _section(Limits, "[limits]", data.pop("limits", {}))
    data["server"] = _server(data.pop("server", {}))
    data["verification"] = _section(VerificationConfig, "[verification]", data.pop("verification", {}))
    signing = data.pop("signing", {})
    if env.get("DOCFENCE_SIGNING_PKCS12_PASSWORD") and isinstance(signing, dict):
        signing = {**signing, "pkcs12_password": env["DOCFENCE_SIGNING_PKCS12_PASSWORD"]}
    data["signing"] = _section(SigningConfig, "[signing]", signing)
    data["webhooks"] = _webhooks(data.pop("webhooks", {}))
    classes = _classes(data.pop("classes", {}), builtin)
    if "report_processors" in data:
        procs = data["report_processors"]
        if not isinstance(procs, list) or not all(isinstance(p, str) for p in procs):
            raise _invalid("report_processors", procs, "must be a list of provider names")
        data["report_processors"] = tuple(procs)
    if "regions" in data and not isinstance(data["regions"], dict):
        raise _invalid("regions", data["regions"], "must be a table of region = storage URL")
    for name in list(data):
        if name not in ("server", "webhooks", "regions", "report_processors", "verification", "signing"):
            data[name] = _typed(name, data[name], known[name])
    for var, (name, typ) in _ENV.items():
        if env.get(var):
            data[name], sources[name] = _from_env(var, env[var], typ.__name__), var
    if env.get("DOCFENCE_REPORT_PROCESSORS"):
        data["report_processors"] = tuple(
            p.strip() for p in env["DOCFENCE_REPORT_PROCESSORS"].split(",") if p.strip())
    for name, (ok, allowed) in _ALLOWED.items():
        if name in data and not ok(data[name]):
            raise _invalid(sources[name], data[name], allowed)
    worker = _worker(worker_table, env)
    default_class = data.get("default_class", Settings.default_class)
    configured = sorted(classes) or ["default"]
    if default_class not in configured:
        raise _invalid(sources.get("default_class", "default_class"), default_class,
                       f"not a configured class (configured: {', '.join(configured)})")
    return Settings(worker=worker, limits=limits, classes=classes, **data)


def _server(table: Any) -> ServerConfig:
    """[server]; `trusted_proxies` is a TOML list of strings."""
    table = _strings_to_tuple(table, "trusted_proxies", "[server]", "IP addresses or CIDRs")
    server: ServerConfig = _section(ServerConfig, "[server]", table)
    return server


def _webhooks(table: Any) -> WebhooksConfig:
    """[webhooks]; `allow_hosts` is a TOML list of strings."""
    table = _strings_to_tuple(table, "allow_hosts", "[webhooks]", "host names, IPs or CIDRs")
    webhooks: WebhooksConfig = _section(WebhooksConfig, "[webhooks]", table)
    return webhooks


def _strings_to_tuple(table: Any, key: str, section: str, what: str) -> Any:
    """The table with its `key` (a TOML list of strings) as the tuple a frozen setting holds."""
    if not isinstance(table, dict) or key not in table:
        return table
    values = table[key]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise _invalid(f"{section}.{key}", values, f"must be a list of {what}")
    return {**table, key: tuple(values)}


def _worker(table: Any, env: dict[str, str]) -> WorkerConfig:
    """[worker] with the DOCFENCE_* worker variables on top; a bad combination names where each came from."""
    table = dict(table) if isinstance(table, dict) else table
    names = {f.name: str(f.type) for f in fields(WorkerConfig)}
    from_env = {}
    for var, name in _WORKER_ENV.items():
        if env.get(var):
            from_env[name] = (var, _from_env(var, env[var], names[name]))
    try:
        base: WorkerConfig = _section(WorkerConfig, "[worker]", table)
        if from_env:
            return replace(base, **{name: value for name, (_, value) in from_env.items()})
        return base
    except ConfigError as exc:
        given = ", ".join(f"{var}={env[var]!r}" for var, _ in from_env.values())
        raise ConfigError(f"{exc.message}{f' (with {given})' if given else ''}") from None


def _classes(tables: Any, builtin: bool) -> dict[str, DocumentClass]:
    """Configured classes added to the built-in `default` (kept unless `builtin_classes = false`)."""
    if not isinstance(tables, dict):
        raise _invalid("classes", tables, "must be tables [classes.NAME]")
    classes = {"default": DocumentClass("default")} if builtin and tables else {}
    for name, spec in tables.items():
        classes[name] = _doc_class(name, spec)
    return classes


_MARK_KEYS = ("marks", "max_marks", "allowed_fields", "timezone", "images")


def _mark_rules(label: str, spec: dict[str, Any]) -> MarkRules:
    """The class's mark settings (popped from `spec`): logos read from their files now, each class mark
    checked now, so a bad setting fails at start-up with the key that names it."""
    given = {key: spec.pop(key) for key in _MARK_KEYS if key in spec}
    try:
        images = given.get("images", {})
        if not isinstance(images, dict) or not all(isinstance(v, str) for v in images.values()):
            raise ConfigError("must be a table of logo name = path to a .png or .svg file", field="images")
        logos = MarkRules(images=tuple((str(k), image_uri(v)) for k, v in images.items()))
        marks = given.get("marks", [])
        if not isinstance(marks, list):
            raise ConfigError("must be an array of tables [[classes.NAME.marks]]", field="marks")
        specs = []
        for mark in marks:
            mark = dict(mark) if isinstance(mark, dict) else mark
            if isinstance(mark, dict) and mark.get("image") is not None:
                mark["image"] = logos.image(mark["image"])
            if isinstance(mark, dict) and isinstance(mark.get("color"), list):
                mark["color"] = tuple(mark["color"])
            specs.append(WatermarkSpec.from_mapping(mark))
        given.update(marks=tuple(specs), images=logos.images)
        return MarkRules(**given)
    except ConfigError as exc:
        key = exc.field if exc.field in _MARK_KEYS else "marks"
        raise ConfigError(f"{label}.{key}: {exc.message}") from None
    except TypeError as exc:
        raise ConfigError(f"{label}: {exc}") from None


def _doc_class(name: str, spec: Any) -> DocumentClass:
    label = f"[classes.{name}]"
    if not isinstance(spec, dict):
        raise _invalid(label, spec, "must be a table of class settings")
    spec = dict(spec)
    if "mode" in spec:
        try:
            spec["mode"] = Mode(spec["mode"])
        except ValueError:
            raise _invalid(f"{label}.mode", spec["mode"], f"allowed: {', '.join(m.value for m in Mode)}") \
                from None
    spec["mark_rules"] = rules = _mark_rules(label, spec)
    if "watermark" in spec:
        wm = spec["watermark"]
        if isinstance(wm, dict) and isinstance(wm.get("color"), list):
            wm = {**wm, "color": tuple(wm["color"])}
        try:
            if isinstance(wm, dict) and wm.get("image") is not None:
                wm = {**wm, "image": rules.image(wm["image"])}  # a logo by name, as in marks
            spec["watermark"] = WatermarkSpec.from_mapping(wm)
            rules.check_fields(spec["watermark"])  # the class's own first mark keeps its field rules too
        except ConfigError as exc:
            raise ConfigError(f"{label}.watermark: {exc.message}") from None
    if "sanitize" in spec:
        policy = spec["sanitize"]
        if not isinstance(policy, dict):
            raise _invalid(f"{label}.sanitize", policy, "must be a table of sanitiser settings")
        try:
            spec["sanitize"] = _section(SanitizePolicy, f"{label}.sanitize", policy)
        except TypeError as exc:
            raise ConfigError(f"{label}.sanitize: {exc}") from None
    for key, spec_cls in (("verification", VerificationSpec), ("signing", SigningSpec)):
        if key in spec:
            table = f"[classes.{name}.{key}]"
            if not isinstance(spec[key], dict):
                raise _invalid(table, spec[key], f"must be a table of {key} settings")
            if key == "verification" and {"url", "code"} & set(spec[key]):
                raise ConfigError(f"{table}: url and code are set per job, not per class")
            spec[key] = _section(spec_cls, table, spec[key])
    return _section(DocumentClass, label, spec, name=name)  # type: ignore[no-any-return]
