"""Typed, frozen settings per component; the only place that reads the environment or a TOML file.

Precedence: defaults < TOML file (DOCFENCE_CONFIG or --config) < DOCFENCE_* environment variables.
Every value is validated here, so a bad setting fails at start-up with a clear message.

One module per component: `worker`, `server`, `webhooks`, `issuing` ([verification], [signing]),
`encryption` ([encryption]),
`classes` ([classes.NAME]); `settings` holds them together, `loader` reads file and variables, `tables`
holds the checks every section shares, `environment` the variables read outside Settings.

The names below are imported when first used: a process that needs only `docfence.config.environment`
(the CLI starting its sandbox zygote first of all) does not pay for the settings' modules. The
`environment()` function is imported from `docfence.config.environment` itself: once that submodule is
loaded, `docfence.config.environment` names the module, so the package cannot also export the function.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docfence.config.classes import DocumentClass
    from docfence.config.encryption import EncryptionConfig
    from docfence.config.environment import (
        ClientSettings,
        admin_database_url,
        load_client_settings,
        sandbox_environment,
    )
    from docfence.config.issuing import SigningConfig, VerificationConfig
    from docfence.config.loader import SETTINGS_ENV, load_limits, load_settings
    from docfence.config.server import ServerConfig
    from docfence.config.settings import DEFAULT_DATABASE_URL, DEFAULT_STORAGE_URL, Settings
    from docfence.config.webhooks import WebhooksConfig
    from docfence.config.worker import WORKER_ENV, WorkerConfig
    from docfence.core.errors import ConfigError

__all__ = [
    "DEFAULT_DATABASE_URL", "DEFAULT_STORAGE_URL", "SETTINGS_ENV", "WORKER_ENV", "ClientSettings",
    "ConfigError", "DocumentClass", "EncryptionConfig", "ServerConfig", "Settings", "SigningConfig",
    "VerificationConfig",
    "WebhooksConfig", "WorkerConfig", "admin_database_url", "load_client_settings",
    "load_limits", "load_settings", "sandbox_environment",
]
_HOME = {
    "DocumentClass": "classes",
    "EncryptionConfig": "encryption",
    **dict.fromkeys(("ClientSettings", "admin_database_url", "load_client_settings", "sandbox_environment"),
                    "environment"),
    "SigningConfig": "issuing", "VerificationConfig": "issuing",
    **dict.fromkeys(("SETTINGS_ENV", "load_limits", "load_settings"), "loader"),
    "ServerConfig": "server",
    **dict.fromkeys(("DEFAULT_DATABASE_URL", "DEFAULT_STORAGE_URL", "Settings"), "settings"),
    "WebhooksConfig": "webhooks",
    "WORKER_ENV": "worker", "WorkerConfig": "worker",
}


def __getattr__(name: str) -> Any:
    if name == "ConfigError":
        from docfence.core.errors import ConfigError

        return ConfigError
    if name not in _HOME:
        raise AttributeError(f"module 'docfence.config' has no attribute {name!r}")
    return getattr(importlib.import_module(f"docfence.config.{_HOME[name]}"), name)
