"""The wheel is the product: built from the checkout, installed into a clean venv without extras, it runs
`docfence demo` from an empty folder (so every SQL file, console file, template and font it needs ships
as package data) and `docfence --version` prints the version from the package metadata.

Installing the wheel's dependencies from the package index (or pip's cache) takes ~80 s on the CI machine.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from docfence.testing.procs import REPO


def _source_copy(dest: Path) -> Path:
    """The files a clean clone would hold plus files not yet committed (never .venv, build/, egg-info):
    building from a copy keeps setuptools' build/ folder, which outlives deleted modules, out of the
    checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True, timeout=60).stdout
    names = [name for name in listed.decode().split("\0") if name]
    assert "pyproject.toml" in names and any(n.startswith("docfence/") for n in names)
    for name in names:
        src = REPO / name
        if src.is_file():  # a file deleted in the working tree but still in the index is skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _build_wheel(tmp_path: Path) -> Path:
    source = _source_copy(tmp_path / "src")
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(dist), str(source)], check=True, timeout=300)
    wheels = list(dist.glob("docfence-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _clean_venv(tmp_path: Path, wheel: Path) -> Path:
    """A venv without system site-packages holding only the wheel and its declared dependencies."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-input", str(wheel)],
                   check=True, timeout=600, capture_output=True)
    return env_dir / "bin"


#: Imports every module the wheel ships, in the clean venv: a dependency used but not declared fails here
#: (the demo alone reaches only the watermark path). docfence.testing needs the dev extras (pytest).
IMPORT_ALL = """
import importlib, pkgutil, docfence
names = [m.name for m in pkgutil.walk_packages(docfence.__path__, "docfence.")
         if not m.name.endswith("__main__") and not m.name.startswith("docfence.testing")]
failed = []
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {exc!r}")
print(len(names), "modules")
assert not failed, "\\n".join(failed)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a clean venv holding the wheel built from this checkout."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    return _clean_venv(tmp_path, _build_wheel(tmp_path))


def test_every_shipped_module_imports_without_extras(installed: Path, tmp_path: Path) -> None:
    out = subprocess.run([str(installed / "python"), "-c", IMPORT_ALL], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert int(out.stdout.split()[0]) > 100  # the walk found the package, not an empty folder


def test_wheel_installs_runs_the_demo_and_reports_its_version(installed: Path, tmp_path: Path) -> None:
    bin_dir = installed
    empty = tmp_path / "empty"
    empty.mkdir()
    demo = subprocess.run([str(bin_dir / "docfence"), "demo"], cwd=empty, capture_output=True, text=True,
                          timeout=600)  # hang guard
    assert demo.returncode == 0, demo.stdout + demo.stderr
    results = re.findall(r"job_\w+ +\S+ +(vector|raster) succeeded .*validation=ok", demo.stdout)
    assert len(results) == 8 and set(results) == {"vector", "raster"}, demo.stdout
    assert (empty / "docfence-demo" / "docfence.db").is_file()

    version = subprocess.run([str(bin_dir / "docfence"), "--version"], cwd=empty, capture_output=True,
                             text=True, timeout=60, check=True)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert version.stdout.strip() == f"docfence {declared}"
