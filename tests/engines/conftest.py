"""Shared fixtures for the engine tests: synthetic samples generated in code."""

from __future__ import annotations

import pytest

from docfence.samples import pdfs


@pytest.fixture(scope="session")
def sample_docs() -> dict[str, bytes]:
    return pdfs.all_samples()


@pytest.fixture(scope="session")
def pages_200() -> bytes:
    return pdfs.many_pages(200)
