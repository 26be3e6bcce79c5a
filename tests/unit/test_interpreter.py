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


def _fake_root(tmp_path: Path) -> Path:
    """A folder holding a tiny `docfence` package whose module prints where it was imported from."""
    root = tmp_path / "root"
    (root / "docfence").mkdir(parents=True)
    (root / "docfence" / "__init__.py").write_text("")
    (root / "docfence" / "probe.py").write_text("import sys\nprint(__file__, *sys.argv[1:])\n")
    return root


@pytest.mark.parametrize("flags", [[], ["-S"]], ids=["another docfence importable", "no docfence at all"])
def test_the_given_root_goes_first_when_docfence_resolves_elsewhere_or_nowhere(
        tmp_path: Path, flags: list[str]) -> None:
    """The bootstrap with a root other than this package's: with site-packages (where our docfence
    resolves) and without them (-S: nothing resolves, and the working directory sits two folders below
    the root, which an empty origin once mistook for the root itself)."""
    from docfence.core import interpreter

    root = _fake_root(tmp_path)
    cwd = root / "docfence" / "sub"
    cwd.mkdir()
    argv = [interpreter.sys.executable, "-P", *flags, "-c", interpreter._BOOTSTRAP, str(root),
            "docfence.probe", "an-argument"]
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(root / "docfence" / "probe.py"), "an-argument"]
