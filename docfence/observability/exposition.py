"""One scrape: a registry holding this host's process metrics (multi-process aware) plus the store gauges,
rendered in the Prometheus text format; and a standalone HTTP server for `worker --metrics-port`."""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.multiprocess import MultiProcessCollector

from docfence.observability import metrics
from docfence.observability.collector import StoreCollector
from docfence.store.base import Store

__all__ = ["CONTENT_TYPE_LATEST", "build_registry", "render_metrics", "serve_metrics"]


def build_registry(store: Store | None) -> CollectorRegistry:
    """Multi-process mode: a fresh registry aggregating every process's files (PROMETHEUS_MULTIPROC_DIR);
    otherwise a registry that reads this process's metrics. Store gauges are added when `store` is given."""
    registry = CollectorRegistry(auto_describe=False)
    if metrics.multiprocess_enabled():
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Delegate(REGISTRY))
    if store is not None:
        registry.register(StoreCollector(store))
    return registry


class _Delegate:
    """Collects another registry's metrics (the default one, where metrics.py registered them)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Any:
        return self.source.collect()

    def describe(self) -> list[Any]:
        return []


def render_metrics(store: Store | None) -> bytes:
    return generate_latest(build_registry(store))


def serve_metrics(port: int, store: Store | None = None, *, addr: str = "127.0.0.1") -> Any:
    """Serve /metrics from this process on `port` (for workers not behind the API); returns the server."""
    server, _thread = _start_http_server(port, addr=addr, registry=build_registry(store))
    return server
