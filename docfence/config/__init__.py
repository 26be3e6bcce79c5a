"""Typed, frozen settings per component; the only place that reads the environment or a TOML file.

Precedence: defaults < TOML file (DOCFENCE_CONFIG or --config) < DOCFENCE_* environment variables.
Every value is validated here, so a bad setting fails at start-up with a clear message.

One module per component: `worker`, `server`, `webhooks`, `issuing` ([verification], [signing]),
`classes` ([classes.NAME]); `settings` holds them together, `loader` reads file and variables, `tables`
holds the checks every section shares, `environment` the variables read outside Settings.
"""

from docfence.config.classes import DocumentClass
from docfence.config.environment import (
    ClientSettings,
    admin_database_url,
    environment,
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
    "ConfigError", "DocumentClass", "ServerConfig", "Settings", "SigningConfig", "VerificationConfig",
    "WebhooksConfig", "WorkerConfig", "admin_database_url", "environment", "load_client_settings",
    "load_limits", "load_settings", "sandbox_environment",
]
