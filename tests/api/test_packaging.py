"""The package as a newcomer gets it: an SPDX license, every import of bench/ scripts covered by an extra,
and a wheel that installs (not editable) into a clean venv and runs `docfence demo`."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string ("psycopg[binary]>=3.1" -> "psycopg")."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _imports(folder: Path) -> set[str]:
    """Top-level modules imported anywhere in the folder's scripts (function-level imports too)."""
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "docfence"}


def test_the_license_is_an_spdx_expression() -> None:
    assert isinstance(PYPROJECT["project"]["license"], str)  # not the deprecated {text = ...} table
    assert re.fullmatch(r"[A-Za-z0-9.+-]+( (AND|OR|WITH) [A-Za-z0-9.+-]+)*", PYPROJECT["project"]["license"])


def test_every_import_of_the_bench_scripts_is_installed_by_the_bench_extra() -> None:
    project = PYPROJECT["project"]
    declared = {_name(r) for r in project["dependencies"]} | {
        _name(r) for r in project["optional-dependencies"]["bench"]}
    providers = metadata.packages_distributions()
    missing = {}
    for module in sorted(_imports(ROOT / "bench")):
        dists = {_name(d) for d in providers.get(module, [module])}
        if not dists & declared:
            missing[module] = sorted(dists)
    assert missing == {}, f"imported by bench/ but in no dependency or the bench extra: {missing}"


def test_the_wheel_installs_into_a_clean_venv_and_runs_the_demo(tmp_path: Path) -> None:
    """Built from a copy of the package (nothing written into the checkout), installed with its
    dependencies from pip's configured indexes and cache, then run from outside any source tree."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "docfence", source / "docfence", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                            str(source)], capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "SetuptoolsDeprecationWarning" not in built.stderr
    (wheel,) = wheels.glob("docfence-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        meta = archive.read(f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info/METADATA")
        names = archive.namelist()
    assert b"License-Expression: Apache-2.0" in meta
    assert any(n.endswith("migrations/sqlite/001_jobs.sql") for n in names)
    assert any(n.endswith("samples/report_templates/monthly/template.html") for n in names)  # package data
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    clean_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("DOCFENCE_", "PYTHON", "VIRTUAL_ENV"))}
    installed = subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", str(wheel)], env=clean_env,
                               capture_output=True, text=True, timeout=1200, check=False)
    assert installed.returncode == 0, installed.stderr[-2000:]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    demo = subprocess.run([str(env_dir / "bin" / "docfence"), "demo", "--dir", str(run_dir / "demo")],
                          cwd=run_dir, env=clean_env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert demo.returncode == 0, demo.stderr[-2000:]
    assert "succeeded" in demo.stdout and "failed" not in demo.stdout.split("results:")[-1]
    where = subprocess.run([str(env_dir / "bin" / "python"), "-c",
                            "import docfence; print(docfence.__file__)"],
                           cwd=run_dir, env=clean_env, capture_output=True, text=True, timeout=60, check=True)
    assert str(env_dir) in where.stdout  # the installed copy ran, not the checkout
