"""The command that runs a docfence module in a new interpreter with this process's own docfence package
(`python -m` puts the working directory first: from a folder holding another docfence checkout, a child
such as a sandbox zygote, a worker or an API server would run that version's code beside ours)."""

from __future__ import annotations

import sys
from pathlib import Path

#: the folder holding the `docfence` package this process imported
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])

# Run by `python -P -c` (no working directory on the path): put PACKAGE_ROOT first unless `docfence`
# already resolves there (an installed package: site-packages stays behind the standard library),
# then run the module as `python -m` would, with the remaining arguments.
_BOOTSTRAP = """\
import importlib.util, os, runpy, sys
root = sys.argv.pop(1)
spec = importlib.util.find_spec("docfence")
found = spec.origin if spec is not None and spec.origin else ""
if not found or os.path.dirname(os.path.dirname(os.path.realpath(found))) != root:
    sys.path.insert(0, root)
module = sys.argv.pop(1)
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def module_command(module: str, *args: str) -> list[str]:
    """argv for `python -m module args...` that imports this process's docfence whatever the working
    directory holds (see the module docstring)."""
    if not module.startswith("docfence."):
        raise ValueError(f"not a docfence module: {module!r}")
    return [sys.executable, "-P", "-c", _BOOTSTRAP, PACKAGE_ROOT, module, *args]
