"""providers/ may import only docfence.core (plus httpx and the standard library)."""

from __future__ import annotations

import sys
from pathlib import Path

import docfence.providers
from docfence.testing.imports import imported_modules

ALLOWED_THIRD_PARTY = {"httpx"}


def test_providers_import_only_core_httpx_and_stdlib() -> None:
    package = Path(docfence.providers.__file__).parent
    for path in sorted(package.glob("*.py")):
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top == "docfence":
                assert name.startswith(("docfence.core", "docfence.providers")), (path.name, name)
            else:
                assert top in ALLOWED_THIRD_PARTY or top in sys.stdlib_module_names, (path.name, name)
