"""The whole configuration as one frozen object (`Settings`): top-level keys, each component's section,
the document classes, and the policy a new job of a class is given."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from docfence.config.classes import DocumentClass
from docfence.config.encryption import EncryptionConfig
from docfence.config.issuing import SigningConfig, VerificationConfig
from docfence.config.server import ServerConfig
from docfence.config.webhooks import WebhooksConfig
from docfence.config.worker import WorkerConfig
from docfence.core.errors import ConfigError
from docfence.core.policy import JobPolicy, Kind, Limits, Mode

DEFAULT_DATABASE_URL = "sqlite:///docfence-data/docfence.db"
DEFAULT_STORAGE_URL = "file:docfence-data/objects"


@dataclass(frozen=True)
class Settings:
    """Every setting, each checked at construction; `load_settings()` builds it from a file and the
    environment."""

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
    encryption: EncryptionConfig = field(default_factory=EncryptionConfig)

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
        database = self.sqlite_path()
        if database is not None:
            return database.parent
        storage = _file_folder(self.storage_url)
        return storage.parent if storage is not None else None

    def sqlite_path(self) -> Path | None:
        """The SQLite database file (sqlite:///relative.db, sqlite:////abs/path.db); None for PostgreSQL."""
        if self.database_url.startswith("sqlite:///"):
            return Path(self.database_url[len("sqlite:///") :])
        return None

    def local_folders(self) -> list[tuple[Path, str]]:
        """(folder, the setting naming it) of each local folder the service writes: the SQLite
        database's, then each file: storage region's."""
        folders: list[tuple[Path, str]] = []
        database = self.sqlite_path()
        if database is not None:
            folders.append((database.parent, "DOCFENCE_DATABASE_URL"))
        for region, url in self.region_urls().items():
            folder = _file_folder(url)
            if folder is not None:
                folders.append((folder, f"[regions] {region}" if self.regions else "DOCFENCE_STORAGE_URL"))
        return folders

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
            sanitize=cls.sanitize, owner_password_policy=cls.owner_password_policy, obscure=cls.obscure,
            validation=cls.validation,
            verification=cls.verification,
            signing=cls.signing,
            marks=cls.mark_rules.marks, fields={},  # fields: filled at submission (service) or left empty
        )
        return base.evolve(**overrides) if overrides else base


def _file_folder(storage_url: str) -> Path | None:
    """The folder of a file: storage URL (file:///abs/dir, file:relative/dir); None for s3:."""
    if storage_url.startswith("file:"):
        return Path(storage_url[len("file:") :].removeprefix("//"))
    return None
