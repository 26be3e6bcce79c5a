"""providers/ may import only docfence.core (plus httpx and the standard library)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import docfence.providers

ALLOWED_THIRD_PARTY = {"httpx"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_providers_import_only_core_httpx_and_stdlib() -> None:
    package = Path(docfence.providers.__file__).parent
    for path in sorted(package.glob("*.py")):
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top == "docfence":
                assert name.startswith(("docfence.core", "docfence.providers")), (path.name, name)
            else:
                assert top in ALLOWED_THIRD_PARTY or top in sys.stdlib_module_names, (path.name, name)
