"""Imports flow one way: api | cli | client | console > service | worker | maintenance | reports |
observability > store | blobs | engines | providers | sandbox > config | faults > core. The sandbox sits
with the engines it runs, below the worker, report dispatcher and CLI that use it; the fault-injection
hook (faults.py) sits below both. Nothing in production imports docfence.testing, and the leaf imports
nothing of docfence."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import docfence

ROOT = Path(docfence.__file__).parent
LEVELS = {
    "core": 0,
    "config": 1, "faults": 1,
    "store": 2, "blobs": 2, "engines": 2, "providers": 2, "layout": 2, "logs": 2, "sandbox": 2,
    "service": 3, "verification": 3, "worker": 3, "maintenance": 3, "reports": 3, "observability": 3,
    "runtime": 3, "demo": 3, "benchmarks": 3, "intake": 3,
    "api": 4, "cli": 4, "client": 4, "console": 4,
}
# Exceptions with a reason: the client is a separate deliverable and imports only core.
CLIENT_ALLOWED = {"core", "client"}


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "docfence" else None


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return [m for m in out if m.startswith("docfence.")]


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        top = rel.parts[0].removesuffix(".py")
        if top not in ("__init__", "__main__", "testing"):
            found.append((top, path))
    return found


def test_every_package_has_a_level() -> None:
    assert {top for top, _ in _modules()} <= set(LEVELS)


def test_imports_flow_downwards() -> None:
    upward = []
    for top, path in _modules():
        for module in _imports(path):
            target = _top(module)
            if target is None or target in ("__init__",):
                continue
            if target == "testing":
                upward.append(f"{path.relative_to(ROOT)} imports {module} (test-only code)")
            elif LEVELS.get(target, 0) > LEVELS[top]:
                upward.append(f"{path.relative_to(ROOT)} imports {module}")
            elif top == "client" and target not in CLIENT_ALLOWED:
                upward.append(f"{path.relative_to(ROOT)} imports {module} (the client needs only core)")
    assert not upward, "\n".join(upward)


def test_core_is_stdlib_only() -> None:
    """core is the leaf: it imports the standard library and itself, nothing installed."""
    for path in (ROOT / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots = [node.module.split(".")[0]]
            elif isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            else:
                continue
            for root in roots:
                allowed = root in ("docfence", "__future__") or root in sys.stdlib_module_names
                assert allowed, (path.name, root)
