"""module_command: a child interpreter imports this process's docfence, never the working directory's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import docfence
from docfence.core.interpreter import PACKAGE_ROOT, module_command


def _poisoned(tmp_path: Path) -> Path:
    folder = tmp_path / "checkout"
    (folder / "docfence" / "testing").mkdir(parents=True)
    (folder / "docfence" / "__init__.py").write_text("raise SystemExit('the wrong docfence')\n")
    return folder


def test_the_child_imports_our_package_from_a_folder_holding_another(tmp_path: Path) -> None:
    folder = _poisoned(tmp_path)
    # the bug this guards against: plain `python -m` from that folder runs the folder's package
    plain = subprocess.run([module_command("docfence.cli")[0], "-m", "docfence.cli", "--version"],
                           cwd=folder, capture_output=True, text=True, check=False)
    assert plain.returncode != 0 and "the wrong docfence" in plain.stderr
    ours = subprocess.run(module_command("docfence.cli", "--version"), cwd=folder, capture_output=True,
                          text=True, check=False)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.startswith("docfence ")


def test_arguments_reach_the_module_and_the_root_is_ours(tmp_path: Path) -> None:
    assert Path(PACKAGE_ROOT) == Path(docfence.__file__).resolve().parents[1]
    code = subprocess.run(module_command("docfence.cli", "no-such-command"), cwd=_poisoned(tmp_path),
                          capture_output=True, text=True, check=False)
    assert code.returncode == 2 and "no-such-command" in code.stderr  # argparse saw the argument


def test_only_docfence_modules() -> None:
    with pytest.raises(ValueError):
        module_command("http.server")
