"""One scrape: a registry holding this host's process metrics (multi-process aware) plus the store gauges,
rendered in the Prometheus text format; and a standalone HTTP server for `worker --metrics-port`."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.multiprocess import MultiProcessCollector

from docfence.observability import metrics
from docfence.observability.collector import GaugeStore, StoreCollector
from docfence.observability.multiproc import ENV_VAR

__all__ = ["CONTENT_TYPE_LATEST", "build_registry", "render_metrics", "serve_metrics"]


def build_registry(store: GaugeStore | None) -> CollectorRegistry:
    """Multi-process mode: a fresh registry aggregating every process's files (PROMETHEUS_MULTIPROC_DIR);
    otherwise a registry that reads this process's metrics. Store gauges are added when `store` is given."""
    registry = CollectorRegistry(auto_describe=False)
    if metrics.multiprocess_enabled():
        folder = Path(os.environ[ENV_VAR])
        registry.register(_FoldLocked(MultiProcessCollector(None), folder))
    else:
        registry.register(_Delegate(REGISTRY))
    if store is not None:
        registry.register(StoreCollector(store))
    return registry


class _FoldLocked:
    """Reads every process's counter files while no starting process is folding a dead one's file into
    the archive (multiproc.fold_dead holds the lock exclusively): between its archive write and its
    unlink, a scrape would count those values twice, and the next scrape would look like a reset."""

    def __init__(self, inner: MultiProcessCollector, folder: Path) -> None:
        self.inner, self.lock = inner, folder / ".fold.lock"

    def collect(self) -> Any:
        with self.lock.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
            return list(self.inner.collect())

    def describe(self) -> list[Any]:
        return []


class _Delegate:
    """Collects another registry's metrics (the default one, where metrics.py registered them)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Any:
        return self.source.collect()

    def describe(self) -> list[Any]:
        return []


def render_metrics(store: GaugeStore | None) -> bytes:
    return generate_latest(build_registry(store))


def serve_metrics(port: int, store: GaugeStore | None = None, *, addr: str = "127.0.0.1") -> Any:
    """Serve /metrics from this process on `port` (for workers not behind the API); returns the server."""
    server, _thread = _start_http_server(port, addr=addr, registry=build_registry(store))
    return server
