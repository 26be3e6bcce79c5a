"""The deployment files in deploy/ stay runnable: every docfence service of compose.yaml and every
systemd unit runs a real docfence subcommand with options it accepts, and the units pass
`systemd-analyze verify`."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from docfence.cli import build_parser
from docfence.testing.procs import REPO

DEPLOY = REPO / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
INSTALLED = "/opt/docfence/bin/docfence"  # where the units expect the wheel's console script


def _docfence_services() -> dict[str, dict[str, Any]]:
    """compose.yaml's services run from the docfence image (its ENTRYPOINT is `docfence`)."""
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = {name: spec for name, spec in compose["services"].items()
                if "docfence" in str(spec.get("image", "")) or "build" in spec}
    assert {"migrate", "api", "worker", "reconciler"} <= set(services), sorted(services)
    return services


def _assert_docfence_command(argv: list[str]) -> None:
    """`docfence <argv>` names a real subcommand (its --help answers) and argparse accepts every option."""
    words = [a for a in argv if not a.startswith("-")][:2]
    helped = subprocess.run([sys.executable, "-m", "docfence.cli", *words[:1], "--help"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert helped.returncode == 0 and f"usage: docfence {words[0]}" in helped.stdout, helped.stderr
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's usage error, with its message on stderr
        raise AssertionError(f"docfence {shlex.join(argv)} does not parse") from exc
    assert getattr(args, "func", None), f"docfence {shlex.join(argv)} runs no command"


def test_compose_services_run_real_docfence_commands() -> None:
    services = _docfence_services()
    assert services["api"]["command"][0] == "serve" and services["migrate"]["command"] == ["db", "upgrade"]
    for name, spec in services.items():
        command = spec["command"]
        assert isinstance(command, list) and command, name
        _assert_docfence_command([str(word) for word in command])


def test_compose_bakes_no_secret() -> None:
    env = next(iter(_docfence_services().values()))["environment"]
    for name in ("DOCFENCE_SIGNING_SECRET", "DOCFENCE_PASSWORD_KEY", "AWS_SECRET_ACCESS_KEY"):
        assert str(env[name]).startswith("${"), f"{name} must come from the environment"


def test_systemd_units_run_real_docfence_commands() -> None:
    assert {u.name for u in UNITS} >= {"docfence-api.service", "docfence-worker@.service",
                                        "docfence-reconcile.service", "docfence-migrate.service"}
    for unit in UNITS:
        starts = [line.split("=", 1)[1] for line in unit.read_text().splitlines()
                  if line.startswith("ExecStart=")]
        assert len(starts) == 1, unit.name
        program, *argv = shlex.split(starts[0])
        assert program == INSTALLED, unit.name
        _assert_docfence_command(argv)


def test_systemd_units_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this machine: the units were not verified")
    # The units name the production path of the console script; here it is this venv's.
    here = str(Path(sys.executable).with_name("docfence"))
    assert Path(here).exists()
    names = []
    for unit in UNITS:
        name = unit.name.replace("@.service", "@1.service")  # verify loads a template by an instance
        (tmp_path / name).write_text(unit.read_text().replace(INSTALLED, here))
        names.append(str(tmp_path / name))
    out = subprocess.run([analyze, "verify", *names], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and str(tmp_path) not in out.stderr, out.stdout + out.stderr
