"""Fixtures for the report pipeline: a store (both dialects) with the report tables emptied, settings and a
local region, the shipped monthly template stored as version 1, and the request use cases over them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docfence.api import create_app
from docfence.blobs import RegionRouter, open_blob_store
from docfence.config import DocumentClass, Settings
from docfence.core.policy import WatermarkSpec
from docfence.reports import ReportRequests, Templates
from docfence.samples.monthly_report import load_monthly_bundle
from docfence.service import Service, build_service
from docfence.store.base import open_store
from docfence.store.sqlstore import SqlStore
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.testing.servers import running


@pytest.fixture
def rstore(store: SqlStore) -> Iterator[SqlStore]:
    store.run_script("truncate_reports")
    yield store
    store.run_script("truncate_reports")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    cls = DocumentClass("default", deadline_s=120.0, watermark=WatermarkSpec(text="SYNTHETIC REPORT"))
    return Settings(database_url=f"sqlite:///{tmp_path}/docfence.db", storage_url=f"file:{tmp_path}/objects",
                    classes={"default": cls}, limits=LONG_BUDGET_LIMITS)  # no budget runs out under load


@pytest.fixture
def router(settings: Settings) -> RegionRouter:
    return RegionRouter({"local": open_blob_store(settings.storage_url)})


@pytest.fixture
def monthly(rstore: SqlStore) -> str:
    info, created = Templates(rstore).create_version("monthly", load_monthly_bundle(), actor="test")
    assert created and info.version == 1
    return info.ref


@pytest.fixture
def requests_uc(settings: Settings, rstore: SqlStore, router: RegionRouter) -> ReportRequests:
    return ReportRequests(settings, rstore, router, processors=("vendor",))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[httpx.Client, Service]]:
    """A real API server on loopback over a fresh SQLite file (test_api.py has its own `api`)."""
    settings = Settings(database_url=f"sqlite:///{tmp_path}/docfence.db", storage_url=f"file:{tmp_path}/obj")
    store = open_store(settings.database_url)
    service = build_service(settings, store)
    try:
        with running(create_app(settings, service=service)) as base, \
                httpx.Client(base_url=base, timeout=30) as client:
            yield client, service
    finally:
        store.close()
