"""Typed, frozen settings per component; the only place that reads the environment or a TOML file.

Precedence: defaults < TOML file (DOCFENCE_CONFIG or --config) < DOCFENCE_* environment variables.
Every value is validated here, so a bad setting fails at start-up with a clear message.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from docfence.core.errors import ConfigError
from docfence.core.policy import (
    VALIDATION_LEVELS,
    JobPolicy,
    Kind,
    Limits,
    Mode,
    SanitizePolicy,
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

    def __post_init__(self) -> None:
        if not 0 < self.deadline_s <= self.max_deadline_s:
            raise ConfigError(f"class {self.name}: deadline_s must be in (0, max_deadline_s]")
        if self.validation not in VALIDATION_LEVELS:
            raise ConfigError(f"class {self.name}: validation must be one of {', '.join(VALIDATION_LEVELS)}")
        unknown = sorted(set(self.limits) - {f.name for f in fields(Limits)})
        if unknown:
            raise ConfigError(f"class {self.name}: unknown limit {unknown[0]!r}")
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
            raise ConfigError("heartbeat_interval_s must be positive and under half of lease_ttl_s")
        if self.batch < 1 or self.poll_interval_s <= 0 or self.reconcile_interval_s <= 0:
            raise ConfigError("batch, poll_interval_s and reconcile_interval_s must be positive")


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

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_idle_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not 0 < getattr(self, name) <= 86400:
                raise ConfigError(f"server.{name} must be in (0, 86400]")
        for name in ("max_header_bytes", "max_json_body_bytes", "max_pending_connections",
                     "max_concurrent_auth"):
            if isinstance(getattr(self, name), bool) or not 0 < getattr(self, name) <= 2**40:
                raise ConfigError(f"server.{name} must be a positive integer")


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
    signing_secret: str = ""  # for signed download URLs; generated per data dir when empty
    signed_url_ttl_s: float = 300.0
    max_upload_bytes: int = 100 * 1024 * 1024
    reconcile_batch: int = 100
    # the reconciler leaves an ended attempt's staged object alone this long (see ReconcileConfig)
    staging_grace_s: float = 60.0
    report_processors: tuple[str, ...] = ()  # outside renderers report requests may name
    log_level: str = "INFO"

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

    def all_classes(self) -> dict[str, DocumentClass]:
        return self.classes or {"default": DocumentClass("default")}

    def region_urls(self) -> dict[str, str]:
        return dict(self.regions) or {"local": self.storage_url}

    def document_class(self, name: str | None) -> DocumentClass:
        name = name or self.default_class
        try:
            return self.all_classes()[name]
        except KeyError:
            raise ConfigError(f"unknown document class {name!r}") from None

    def policy_for(self, class_name: str | None, *, mode_override: str | None = None,
                   **overrides: Any) -> JobPolicy:
        """The frozen policy a new job of this class gets (the caller may only tighten the deadline)."""
        cls = self.document_class(class_name)
        deadline = float(overrides.pop("deadline_s", None) or cls.deadline_s)
        if not 0 < deadline <= cls.max_deadline_s:
            raise ConfigError(f"deadline_s must be in (0, {cls.max_deadline_s:g}] for class {cls.name}")
        base = JobPolicy(
            kind=Kind.WATERMARK, document_class=cls.name, mode=Mode(mode_override or cls.mode),
            dpi=cls.dpi, watermark=cls.watermark, deadline_s=deadline, lease_ttl_s=self.worker.lease_ttl_s,
            max_attempts=cls.max_attempts, region=cls.region, retention_s=cls.retention_s,
            limits=replace(self.limits, **cls.limits) if cls.limits else self.limits,
            sanitize=cls.sanitize,
            validation=cls.validation,
        )
        return base.evolve(**overrides) if overrides else base


_ENV = {
    "DOCFENCE_DATABASE_URL": ("database_url", str),
    "DOCFENCE_STORAGE_URL": ("storage_url", str),
    "DOCFENCE_SIGNING_SECRET": ("signing_secret", str),
    "DOCFENCE_DEFAULT_CLASS": ("default_class", str),
    "DOCFENCE_MAX_UPLOAD_BYTES": ("max_upload_bytes", int),
    "DOCFENCE_LOG_LEVEL": ("log_level", str),
    "DOCFENCE_STAGING_GRACE_S": ("staging_grace_s", float),
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


def load_settings(path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> Settings:
    """Build Settings from an optional TOML file and the DOCFENCE_* environment."""
    env = dict(os.environ if env is None else env)
    path = path or env.get("DOCFENCE_CONFIG")
    data: dict[str, Any] = {}
    if path:
        try:
            data = tomllib.loads(Path(path).read_text("utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        return _build(data, env)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc


def _build(data: dict[str, Any], env: dict[str, str]) -> Settings:
    known = {f.name for f in fields(Settings)}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
    worker = WorkerConfig(**data.pop("worker", {}))
    limits = Limits(**data.pop("limits", {}))
    data["server"] = ServerConfig(**data.pop("server", {}))
    classes = {name: _doc_class(name, spec) for name, spec in data.pop("classes", {}).items()}
    if "report_processors" in data:
        data["report_processors"] = tuple(data["report_processors"])
    settings = Settings(worker=worker, limits=limits, classes=classes, **data)
    changes: dict[str, Any] = {}
    for var, (name, typ) in _ENV.items():
        if var in env and env[var] != "":
            changes[name] = typ(env[var])
    worker_changes: dict[str, Any] = {
        name: float(env[var]) for var, name in _WORKER_ENV.items() if env.get(var)
    }
    if "batch" in worker_changes:
        worker_changes["batch"] = int(worker_changes["batch"])
    if env.get("DOCFENCE_REPORT_PROCESSORS"):
        changes["report_processors"] = tuple(
            p.strip() for p in env["DOCFENCE_REPORT_PROCESSORS"].split(",") if p.strip())
    if worker_changes:
        changes["worker"] = replace(worker, **worker_changes)
    return replace(settings, **changes) if changes else settings


def _doc_class(name: str, spec: dict[str, Any]) -> DocumentClass:
    spec = dict(spec)
    if "mode" in spec:
        spec["mode"] = Mode(spec["mode"])
    if "watermark" in spec:
        wm = dict(spec["watermark"])
        if "color" in wm:
            wm["color"] = tuple(wm["color"])
        spec["watermark"] = WatermarkSpec(**wm)
    if "sanitize" in spec:
        spec["sanitize"] = SanitizePolicy(**spec["sanitize"])
    return DocumentClass(name=name, **spec)
