"""Who imports whom inside docfence, read from the source (function-local imports included): the one
helper the layering tests share, and cycle detection over the module graph."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import docfence

ROOT = Path(docfence.__file__).parent


def imported_modules(path: Path, *, package: str | None = None) -> set[str]:
    """Every module `path` imports, anywhere in it (top level or inside a function), as an absolute
    dotted name. Relative imports are resolved against `package` (the file's own package when None)."""
    package = package if package is not None else _package_of(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, package)
            if base is None:
                continue
            submodules = {f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}")}
            # `from docfence.engines import decode` imports the module docfence.engines.decode, as
            # `import docfence.engines.decode` would; names that are not modules come from `base`.
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(base)
    return found


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def production_modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every docfence module except the test-only `docfence.testing`."""
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        if not name.startswith("docfence.testing"):
            yield name, path


def module_graph() -> dict[str, set[str]]:
    """docfence module -> the docfence modules it imports (production code only)."""
    modules = dict(production_modules())
    return {name: {m for m in imported_modules(path) if m in modules and m != name}
            for name, path in modules.items()}


def package_of(module: str) -> str:
    """The room a module lives in: `docfence.store.sqlite` -> `store`, `docfence.service` -> `service`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted: every import
    cycle is inside one of them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the number of modules (~200)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_of(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(node: ast.ImportFrom, package: str) -> str | None:
    if node.level == 0:
        return node.module
    parts = package.split(".")
    if node.level - 1 > len(parts):
        return None
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def _is_module(name: str) -> bool:
    if not name.startswith("docfence."):
        return False
    rel = Path(*name.split(".")[1:])
    return (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file()
