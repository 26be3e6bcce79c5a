"""Import direction: metrics.py is callable from worker/maintenance (core + prometheus_client only);
observability never imports the layers above it; the console reaches the store through the Store type."""

from __future__ import annotations

from pathlib import Path

import docfence
from docfence.testing.imports import imported_modules

ROOT = Path(docfence.__file__).parent


def test_metrics_module_imports_only_core_and_prometheus_client() -> None:
    for name in imported_modules(ROOT / "observability" / "metrics.py"):
        allowed = ("docfence.core", "prometheus_client", "__future__", "collections", "typing")
        assert name.startswith(allowed), name


def test_observability_stays_below_api_cli_console_worker() -> None:
    for path in sorted((ROOT / "observability").rglob("*.py")):
        for name in imported_modules(path):
            above = ("docfence.api", "docfence.cli", "docfence.worker",
                     "docfence.maintenance", "docfence.service", "fastapi")
            assert not name.startswith(above), (path.name, name)


def test_console_uses_the_store_protocol_only() -> None:
    for path in sorted((ROOT / "api" / "console").rglob("*.py")):
        for name in imported_modules(path):
            if name.startswith("docfence.store"):
                assert name == "docfence.store.base", (path.name, name)
            assert not name.startswith(("docfence.worker", "docfence.engines", "docfence.blobs")), name


def test_static_console_loads_nothing_from_the_internet() -> None:
    for path in (ROOT / "api" / "console" / "static").iterdir():
        text = path.read_text("utf-8")
        text = text.replace("http://www.w3.org/2000/svg", "")  # the SVG namespace, not a fetch
        assert "http://" not in text and "https://" not in text, path
        assert "innerHTML" not in text and "eval(" not in text, path
