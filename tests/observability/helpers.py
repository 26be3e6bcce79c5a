"""Helpers for observability tests: job factories, a metrics parser, and a real uvicorn server (API +
console) on a loopback port."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from docfence.api import create_app
from docfence.api.console import install
from docfence.config import Settings, WorkerConfig
from docfence.core.clock import Clock
from docfence.core.policy import JobPolicy, Mode
from docfence.core.records import Job, NewJob
from docfence.service import Service, build_service
from docfence.store.base import Store
from docfence.testing.procs import LONG_BUDGET_LIMITS

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def submit(store: Store, *, tenant: str = "acme", mode: str = "vector", **policy: Any) -> Job:
    job, created = store.submit(NewJob(tenant=tenant, policy=JobPolicy(mode=Mode(mode), **policy)))
    assert created
    return job


def samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed by (name, labels)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def make_settings(tmp: Path, **worker: Any) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp}/docfence.db", storage_url=f"file://{tmp}/objects",
                    signing_secret="s" * 32, worker=WorkerConfig(**worker) if worker else WorkerConfig(),
                    limits=LONG_BUDGET_LIMITS)  # success must not depend on the render budget under load


def console_app(settings: Settings, store: Store, clock: Clock | None = None) -> tuple[FastAPI, Service]:
    service = build_service(settings, store, clock=clock)
    app = create_app(settings, service=service)
    install(app)  # idempotent: create_app already mounts the console
    return app, service


@dataclass
class Served:
    settings: Settings
    store: Store
    service: Service
    base_url: str
