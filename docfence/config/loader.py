"""Where settings come from: defaults < TOML file (DOCFENCE_CONFIG or --config) < DOCFENCE_* variables.

Every ConfigError raised here is one line that names the setting as the user wrote it."""

from __future__ import annotations

import os
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

from docfence.config.classes import classes_from
from docfence.config.encryption import encryption_from
from docfence.config.issuing import VerificationConfig, signing_from
from docfence.config.server import server_from
from docfence.config.settings import Settings
from docfence.config.tables import from_env, invalid, section, typed
from docfence.config.webhooks import webhooks_from
from docfence.config.worker import worker_from
from docfence.core.errors import ConfigError
from docfence.core.policy import Limits

#: Environment variable -> (top-level setting it overrides, its type).
SETTINGS_ENV = {
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
#: Sections ([name]) of the file, each built by its component's module rather than typed as a value.
_TABLES = ("classes", "worker", "limits", "server", "webhooks", "verification", "signing", "encryption")


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
    limits: Limits = section(Limits, "[limits]", table)
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


def _build(data: dict[str, Any], env: dict[str, str]) -> Settings:
    data = dict(data)
    builtin = data.pop("builtin_classes", True)
    if not isinstance(builtin, bool):
        raise invalid("builtin_classes", builtin, "must be true or false")
    known = {f.name: str(f.type) for f in fields(Settings)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        top = sorted({*known, "builtin_classes"} - set(_TABLES))
        raise ConfigError(f"unknown setting {unknown[0]!r} (allowed top-level keys: {', '.join(top)}; "
                          "tables: [classes.NAME], [worker], [limits], [server], [webhooks], [verification], "
                          "[signing], [encryption])")
    sources = {name: name for name in data}
    worker_table = data.pop("worker", {})
    sections = _sections(data, env, builtin)
    _top_level(data, known, sources, env)
    worker = worker_from(worker_table, env)
    default_class = data.get("default_class", Settings.default_class)
    configured = sorted(sections["classes"]) or ["default"]
    if default_class not in configured:
        raise invalid(sources.get("default_class", "default_class"), default_class,
                      f"not a configured class (configured: {', '.join(configured)})")
    return Settings(worker=worker, **sections, **data)


def _sections(data: dict[str, Any], env: dict[str, str], builtin: bool) -> dict[str, Any]:
    """The file's tables except [worker] (popped from `data`), each built by its component's module."""
    return {
        "limits": section(Limits, "[limits]", data.pop("limits", {})),
        "server": server_from(data.pop("server", {})),
        "verification": section(VerificationConfig, "[verification]", data.pop("verification", {})),
        "signing": signing_from(data.pop("signing", {}), env),
        "encryption": encryption_from(data.pop("encryption", {}), env),
        "webhooks": webhooks_from(data.pop("webhooks", {})),
        "classes": classes_from(data.pop("classes", {}), builtin),
    }


def _top_level(data: dict[str, Any], known: dict[str, str], sources: dict[str, str],
               env: dict[str, str]) -> None:
    """Top-level keys of the file typed in place, then the variables over them (`sources` records
    which variable set a value, so an error names it)."""
    if "report_processors" in data:
        procs = data["report_processors"]
        if not isinstance(procs, list) or not all(isinstance(p, str) for p in procs):
            raise invalid("report_processors", procs, "must be a list of provider names")
        data["report_processors"] = tuple(procs)
    if "regions" in data and not isinstance(data["regions"], dict):
        raise invalid("regions", data["regions"], "must be a table of region = storage URL")
    for name in list(data):
        if name not in ("regions", "report_processors"):
            data[name] = typed(name, data[name], known[name])
    for var, (name, typ) in SETTINGS_ENV.items():
        if env.get(var):
            data[name], sources[name] = from_env(var, env[var], typ.__name__), var
    if env.get("DOCFENCE_REPORT_PROCESSORS"):
        data["report_processors"] = tuple(
            p.strip() for p in env["DOCFENCE_REPORT_PROCESSORS"].split(",") if p.strip())
    for name, (ok, allowed) in _ALLOWED.items():
        if name in data and not ok(data[name]):
            raise invalid(sources[name], data[name], allowed)
