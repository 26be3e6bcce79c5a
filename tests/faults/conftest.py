"""The fault harness's tests (docfence/harness/fault_*.py): real `serve`, `worker` and `reconcile`
processes, faults injected from outside. Each scenario runs once with a few jobs; DOCFENCE_SOAK=1 runs
the bigger versions. The PostgreSQL restart runs only when selected (`-m pg_restart`, its own CI step),
so no other test shares its outage."""

from __future__ import annotations

import os

import pytest

from docfence.harness.fault_runs import Verdict

SOAK = bool(os.environ.get("DOCFENCE_SOAK"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "pg_restart" in (config.getoption("-m") or ""):
        return
    restart = [item for item in items if item.get_closest_marker("pg_restart")]
    if restart:
        config.hook.pytest_deselected(items=restart)
        items[:] = [item for item in items if item not in restart]


def assert_held(verdict: Verdict) -> None:
    """Both promises, nothing lost, and the scenario's own checks; the message lists what broke."""
    report = verdict.as_dict()
    assert verdict.jobs >= 1 and verdict.checks, report  # the scenario ran and checked something
    assert verdict.terminal == verdict.jobs, report
    assert verdict.deadline_misses == 0, report
    assert verdict.lost == 0, report
    assert verdict.stale_publishes == 0, report
    assert all(verdict.checks.values()), report
    assert verdict.held, report
