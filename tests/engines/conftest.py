"""Shared fixtures for the engine tests: synthetic samples generated in code."""

from __future__ import annotations

import pytest

from docfence.engines import samples


@pytest.fixture(scope="session")
def sample_docs() -> dict[str, bytes]:
    return samples.all_samples()


@pytest.fixture(scope="session")
def pages_200() -> bytes:
    return samples.many_pages(200)
