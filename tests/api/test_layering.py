"""Import direction of the API side: client imports only core and itself; api never touches store
internals (the Store protocol type only); service sits below api and cli."""

from __future__ import annotations

from pathlib import Path

import docfence
from docfence.testing.imports import imported_modules

ROOT = Path(docfence.__file__).parent


def _docfence_imports(path: Path) -> set[str]:
    return {name for name in imported_modules(path) if name.startswith("docfence")}


def _package(name: str) -> list[Path]:
    return sorted((ROOT / name).rglob("*.py"))


def test_client_imports_only_core_and_itself() -> None:
    for path in _package("client"):
        for name in _docfence_imports(path):
            assert name.startswith(("docfence.core", "docfence.client")), (path.name, name)


def test_api_reaches_the_store_only_through_service_and_the_protocol_type() -> None:
    for path in _package("api"):
        for name in _docfence_imports(path):
            if name == "docfence.store.base":
                continue
            assert not name.startswith(("docfence.store.", "docfence.blobs.", "docfence.engines",
                                        "docfence.worker", "docfence.cli")), (path.name, name)


def test_service_does_not_import_upper_layers() -> None:
    for path in _package("service"):
        for name in _docfence_imports(path):
            assert not name.startswith(("docfence.api", "docfence.cli", "docfence.client")), (path.name, name)
