"""Fixtures for observability tests: a real uvicorn server (API + console) over SQLite + a file:// folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from docfence.store.base import open_store
from docfence.testing.servers import running

from .helpers import Served, console_app, make_settings


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    settings = make_settings(tmp_path, poll_interval_s=0.2, heartbeat_interval_s=1.0)
    store = open_store(settings.database_url)
    app, service = console_app(settings, store)
    try:
        with running(app) as url:
            yield Served(settings, store, service, url)
    finally:
        store.close()
