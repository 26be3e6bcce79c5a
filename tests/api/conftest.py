"""Fixtures for API tests: a real uvicorn server on a free loopback port over a fresh SQLite (or
PostgreSQL) store and a file:// blob folder, plus helpers that drive jobs through the store."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from docfence import storage_keys
from docfence.api import create_app
from docfence.blobs.kek.jobs import put_object
from docfence.client import DocfenceClient
from docfence.config import Settings
from docfence.core.clock import FakeClock, utcnow
from docfence.core.records import ArtifactInfo, Job
from docfence.service import Service, build_service
from docfence.service.artifacts_keys import job_keys, row_key
from docfence.store.base import Store, open_store
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.testing.servers import running
from docfence.testing.stores import temporary_pg_database

PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"


@dataclass
class Seen:
    method: str
    path: str
    authorization: str | None


class Recorder:
    """ASGI middleware that remembers each request's path and Authorization header (tests only)."""

    def __init__(self, app: Any, seen: list[Seen]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.seen.append(Seen(scope["method"], scope["path"], headers.get("authorization")))
        await self.app(scope, receive, send)


@dataclass
class ApiEnv:
    settings: Settings
    store: Store
    service: Service
    clock: FakeClock
    base_url: str
    tmp: Path
    seen: list[Seen] = field(default_factory=list)

    def key(self, tenant: str = "acme", scopes: tuple[str, ...] = ("submit", "read")) -> str:
        return self.service.create_api_key(tenant, scopes, name="test")[1]

    def client(self, key: str | None = None) -> DocfenceClient:
        return DocfenceClient(self.base_url, key or self.key())

    def finish(self, job_id: str, data: bytes = b"%PDF-1.4 watermarked\n", pages: int = 1) -> Job:
        """Play the worker: claim, publish under the attempt's artifact key, fenced commit."""
        return self.commit(self.claim(job_id), data, pages)

    def commit(self, claim: Any, data: bytes = b"%PDF-1.4 watermarked\n", pages: int = 1) -> Job:
        """Play the worker for a claim already taken: publish under its artifact key, fenced commit."""
        job_id = claim.job.id
        key = storage_keys.artifact_key(claim.job.tenant, job_id, claim.attempt)
        sealed_under = job_keys(self.service).key_for(row_key(claim.job))  # sealed, as the worker does
        put_object(self.service.router.for_region(claim.job.region), key, data, sealed_under)
        info = ArtifactInfo(key=key, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), pages=pages)
        return self.store.complete(job_id, claim.attempt, "test-worker", info)

    def claim(self, job_id: str) -> Any:
        claims = self.store.claim("test-worker", limit=50)
        mine = [c for c in claims if c.job.id == job_id]
        assert mine, f"job {job_id} was not claimable"
        return mine[0]


@contextmanager
def api_env(tmp: Path, database_url: str | None = None, **overrides: Any) -> Iterator[ApiEnv]:
    overrides.setdefault("limits", LONG_BUDGET_LIMITS)  # jobs that must succeed: no budget ends under load
    settings = Settings(database_url=database_url or f"sqlite:///{tmp}/docfence.db",
                        storage_url=f"file://{tmp}/objects", **overrides)
    store = open_store(settings.database_url)
    clock = FakeClock(start=utcnow())
    service = build_service(settings, store, clock=clock)
    app = create_app(settings, service=service)
    seen: list[Seen] = []
    app.add_middleware(Recorder, seen=seen)
    try:
        with running(app) as base_url:
            yield ApiEnv(settings, store, service, clock, base_url, tmp, seen)
    finally:
        store.close()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ApiEnv]:
    with api_env(tmp_path) as e:
        yield e


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ApiEnv]:
    """The same API over each store backend (PostgreSQL: a throwaway database)."""
    if request.param == "sqlite":
        with api_env(tmp_path) as e:
            yield e
        return
    with temporary_pg_database("docfence_api") as url, api_env(tmp_path, url) as e:
        yield e
