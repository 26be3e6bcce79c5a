"""`docfence serve --host H --port P`: run the HTTP API with uvicorn (access log off), after the start-up
checks every long-running command shares: each fails at once with one line naming what to fix."""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

from docfence.config import Settings, load_settings
from docfence.core.errors import ConfigError

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def register(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the HTTP API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port_number, default=8080, help="0-65535 (0: any free port)")
    serve.add_argument("--log-level", default=None, choices=LOG_LEVELS,
                       help="default: debug with docfence --debug, else DOCFENCE_LOG_LEVEL (info)")
    serve.set_defaults(func=run_serve)


def port_number(text: str) -> int:
    """argparse type of --port: a usage error (exit 2) names the value and the range."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is out of range (0-65535)")
    return port


def log_level(args: argparse.Namespace, settings: Settings) -> str:
    """--log-level, else debug under `docfence --debug`, else the DOCFENCE_LOG_LEVEL setting."""
    if getattr(args, "log_level", None):
        return str(args.log_level)
    return "debug" if getattr(args, "debug", False) else settings.log_level.lower()


def run_serve(args: argparse.Namespace) -> int:
    from docfence.api import serve

    settings = load_settings()
    check_startup(settings)
    serve(settings, args.host, args.port, log_level=log_level(args, settings))
    return 0


def check_startup(settings: Settings) -> None:
    """What a long-running command (serve, worker, reconcile) checks before anything starts; raises
    ConfigError naming the path or setting: a local data folder that cannot be created or written, or a
    password key (DOCFENCE_PASSWORD_KEY, or the data folder's key file) that is not a Fernet key, or a
    key file that group or others may read. Sets a private umask first: what this process and its
    children create is 0600/0700."""
    from docfence.config.key_files import check_key_files
    from docfence.core.private_files import private_umask

    private_umask()
    check_data_folders(settings)
    if settings.password_key or settings.data_folder() is not None:
        from docfence.blobs.sealed import load_key

        load_key(settings)  # the data folder's key file is made here when missing, not at the first upload
    check_key_files(settings)


def check_data_folders(settings: Settings) -> None:
    """Each local data folder exists (made when missing) and this process can write in it; else a
    ConfigError naming the folder's absolute path, the reason and the setting that names it."""
    for folder, setting in settings.local_folders():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):  # writable by this process (not only by its mode)
                pass
        except OSError as exc:
            raise ConfigError(f"data folder {folder.absolute()} is not usable: {exc.strerror or exc} "
                              f"(make it writable by this process, or point {setting} at another folder)"
                              ) from None
