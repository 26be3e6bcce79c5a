"""Helpers for observability tests: job factories, a metrics parser, and a real uvicorn server (API +
console) on a loopback port."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from docfence.api import create_app
from docfence.config import Settings, WorkerConfig
from docfence.console import install
from docfence.core.clock import Clock
from docfence.core.policy import JobPolicy, Mode
from docfence.core.records import Job, NewJob
from docfence.service import Service, build_service
from docfence.store.base import Store

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
                    signing_secret="s" * 32, worker=WorkerConfig(**worker) if worker else WorkerConfig())


def console_app(settings: Settings, store: Store, clock: Clock | None = None) -> tuple[FastAPI, Service]:
    service = build_service(settings, store, clock=clock)
    app = create_app(settings, service=service)
    install(app)  # idempotent: a no-op once the lead mounts the console in create_app
    return app, service


@contextmanager
def running(app: FastAPI) -> Iterator[str]:
    """Serve `app` with uvicorn on a free loopback port in a thread; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@dataclass
class Served:
    settings: Settings
    store: Store
    service: Service
    base_url: str
