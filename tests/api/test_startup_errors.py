"""Start-up errors of the long-running commands, run as real processes: one line on stderr naming what
to fix, exit 2, no traceback; nothing is served. And `docfence --debug serve` logs at DEBUG."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from docfence.cli.serve import log_level
from docfence.config import Settings

GOOD_KEY = "x" * 43 + "="  # 32 url-safe base64-encoded bytes: a Fernet key


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (),
         data: str | None = None) -> subprocess.CompletedProcess[str]:
    folder = data or str(tmp_path / "data")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DOCFENCE_", "PROMETHEUS_"))}
    base.update(DOCFENCE_DATABASE_URL=f"sqlite:///{folder}/docfence.db",
                DOCFENCE_STORAGE_URL=f"file:{folder}/objects", **(env or {}))
    return subprocess.run([*prefix, sys.executable, "-m", "docfence.cli", *args], env=base, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def _one_line(proc: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error(tmp_path: Path, port: str) -> None:
    _one_line(_run(tmp_path, "serve", "--port", port), "--port", port)


def test_a_port_in_use_is_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        _one_line(_run(tmp_path, "serve", "--port", str(port)), f"127.0.0.1:{port}", "in use", "--port")


def test_a_data_folder_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    where = tmp_path / "a-file" / "data"
    for command in (("serve", "--port", "0"), ("reconcile",)):
        _one_line(_run(tmp_path, *command, data=str(where)), str(where), "DOCFENCE_DATABASE_URL")


def test_a_read_only_data_folder_is_named() -> None:
    """As a user who may not write there (root may write anywhere: the command runs as nobody then, in
    a folder nobody can reach)."""
    prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups") if os.geteuid() == 0 else ()
    if prefix and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no user to whom a folder is read-only")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        folder = base / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        proc = _run(base, "serve", "--port", "0", data=str(folder), prefix=prefix)
    _one_line(proc, str(folder), "not usable", "Permission denied", "DOCFENCE_DATABASE_URL")


@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("reconcile",)])
def test_an_invalid_password_key_fails_at_start_up(tmp_path: Path, command: tuple[str, ...]) -> None:
    _one_line(_run(tmp_path, *command, env={"DOCFENCE_PASSWORD_KEY": "not-a-fernet-key"}),
              "DOCFENCE_PASSWORD_KEY", "Fernet key")


def test_a_valid_password_key_passes_the_start_up_check(tmp_path: Path) -> None:
    proc = _run(tmp_path, "reconcile", "--once", "--no-webhooks", env={"DOCFENCE_PASSWORD_KEY": GOOD_KEY})
    assert proc.returncode == 0, proc.stderr


def test_debug_lowers_the_serve_log_level() -> None:
    settings = Settings()
    assert log_level(argparse.Namespace(debug=True, log_level=None), settings) == "debug"
    assert log_level(argparse.Namespace(debug=False, log_level=None), settings) == "info"
    assert log_level(argparse.Namespace(debug=True, log_level="warning"), settings) == "warning"
