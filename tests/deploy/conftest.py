"""The deployment tests' selection: the `containers` tests (docfence's image under podman, test_containers.py)
build and run containers for minutes, so they run only when selected with `-m containers` (their own CI
step, `== containers` in .ci/run), never as part of the suite's default run."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "containers: builds and runs docfence's image with podman; selected only with "
                   "-m containers (its own CI step)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "containers" in (config.getoption("-m") or ""):
        return
    containers = [item for item in items if item.get_closest_marker("containers")]
    if containers:
        config.hook.pytest_deselected(items=containers)
        items[:] = [item for item in items if item not in containers]
