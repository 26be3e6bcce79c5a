"""Imports flow one way, by one table: each room (a package or top-level module, or a named module of
one) has a floor, and a module may import only from its own room or from a lower floor. An import
into the same floor from another room (sideways) or from a higher floor (upward) is refused unless it
is listed, with its reason, in ALLOWED. Cycles are refused at two sizes: between modules, and between
rooms. Function-local imports count (a local import hides a cycle, it does not remove it)."""

from __future__ import annotations

import sys

from docfence.testing.imports import ROOT, cycles, imported_modules, module_graph, production_modules

#: Room -> floor. A dotted room ("observability.metrics") is a module that sits lower than the rest of
#: its package: the longest matching room decides.
FLOORS = {
    "core": 0,
    "config": 1, "faults": 1,
    # report rendering and sample PDFs import only core (and their libraries): the watermark engines
    # reuse the report's asset-only URL fetcher; samples are drawn by the sandbox's warm-ups and the demo
    "engines.report": 1, "samples": 1,
    # bytes, rows and counters: each knows nothing of jobs' workflow
    "store": 2, "blobs": 2, "engines": 2, "providers": 2, "storage_keys": 2, "logs": 2,
    "observability.metrics": 2,  # core + prometheus_client only, so every layer above may count
    "samples.monthly_report": 2,  # the sample report template, loaded with engines.report's bundle loader
    "sandbox": 3,  # runs the engines in render processes under limits
    "intake": 3,  # an upload checked and stored before its job exists
    "maintenance": 4, "worker": 4, "reports": 4, "observability": 4,
    "verification": 4,  # what the public verification page may say about an issued document
    "service": 5,  # use cases; deletion is the maintenance service's job, the service calls it
    "wiring": 5,  # wires store, blobs, worker and reconciler for the commands
    "harness": 5,  # starts docfence processes and scratch databases for benchmarks and tests
    "demo": 6, "benchmarks": 6,
    "api": 7, "client": 7,  # the operator console is part of the API (api/console: its routes, its keys)
    "cli": 8,  # commands over everything, including the HTTP client and `serve`
}
#: (importing room, imported room): why this import against the floors is allowed. Keep it empty.
ALLOWED: dict[tuple[str, str], str] = {}
#: The client is a separate deliverable: it needs nothing of docfence but core.
CLIENT_ALLOWED = {"core", "client"}


def room(module: str) -> str:
    rest = module.split(".", 1)[1] if "." in module else ""
    matches = [r for r in FLOORS if rest == r or rest.startswith(r + ".")]
    assert matches, f"{module} has no floor: add its room to FLOORS"
    return max(matches, key=len)


def test_every_module_has_a_floor() -> None:
    for name, _path in production_modules():
        if name != "docfence":
            room(name)


def test_no_import_goes_up_or_sideways() -> None:
    wrong = []
    for module, targets in module_graph().items():
        if module == "docfence":
            continue
        here = room(module)
        for target in sorted(targets):
            there = room(target) if target != "docfence" else "core"
            if here == there or (here, there) in ALLOWED:
                continue
            if FLOORS[there] >= FLOORS[here]:
                way = "up" if FLOORS[there] > FLOORS[here] else "sideways"
                wrong.append(f"{module} ({here}, floor {FLOORS[here]}) imports {target} ({there}, "
                             f"floor {FLOORS[there]}): {way}")
    assert not wrong, "\n".join(wrong)


def test_no_module_import_cycles() -> None:
    assert cycles(module_graph()) == []


def test_no_room_import_cycles() -> None:
    rooms: dict[str, set[str]] = {}
    for module, targets in module_graph().items():
        if module == "docfence":
            continue
        rooms.setdefault(room(module), set()).update(room(t) for t in targets if t != "docfence")
    assert cycles({r: targets - {r} for r, targets in rooms.items()}) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_production_never_imports_the_test_helpers() -> None:
    used = [(name, m) for name, path in production_modules() for m in imported_modules(path)
            if m.startswith("docfence.testing")]
    assert used == []


def test_the_test_helpers_never_import_the_benchmarks() -> None:
    """What tests and benchmarks share lives below both (in `harness`): a test that runs a benchmark's
    module would fail when the benchmark changes what it measures."""
    used = [(path.name, m) for path in (ROOT / "testing").rglob("*.py") for m in imported_modules(path)
            if m.startswith("docfence.benchmarks")]
    assert used == []


def test_the_client_needs_only_core() -> None:
    for name, path in production_modules():
        if name == "docfence" or room(name) != "client":
            continue
        for module in imported_modules(path):
            if module.startswith("docfence."):
                assert room(module) in CLIENT_ALLOWED, (name, module)


def test_core_is_stdlib_only() -> None:
    """core is the leaf: it imports the standard library and itself, nothing installed."""
    for path in (ROOT / "core").rglob("*.py"):
        for module in imported_modules(path):
            top = module.split(".")[0]
            assert top in ("docfence", "__future__") or top in sys.stdlib_module_names, (path.name, module)
            if top == "docfence":
                assert room(module) == "core", (path.name, module)
