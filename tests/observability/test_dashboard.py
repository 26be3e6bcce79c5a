"""deploy/grafana/docfence-dashboard.json is built on the metric names docfence ships: every metric a
panel queries is exposed by a real scrape (the API's /metrics registry over a real store)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from docfence.observability.exposition import render_metrics
from docfence.store.base import open_store

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "docfence-dashboard.json"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gaugehistogram": ("_bucket", "_gsum", "_gcount"), "gauge": ("",)}


def _exposed(tmp_path: Path) -> set[str]:
    store = open_store(f"sqlite:///{tmp_path}/docfence.db")
    try:
        text = render_metrics(store).decode()
    finally:
        store.close()
    names: set[str] = set()
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names |= {family + suffix for suffix in SUFFIXES.get(kind, ("",))}
        if kind == "counter":
            names.add(family)  # prometheus_client names the family without _total
    return names


def test_every_panel_queries_only_shipped_metrics(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    exposed = _exposed(tmp_path)
    queried = {}
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for name in re.findall(r"\bdocfence_[a-z0-9_]+", target["expr"]):
                queried[name] = panel["title"]
    missing = {name: title for name, title in queried.items() if name not in exposed}
    assert missing == {}, f"panels query metrics docfence does not expose: {missing}"
    assert len(queried) >= 15  # the dashboard covers the shipped metrics, not a token few
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_reconcile_serves_its_counters(tmp_path: Path) -> None:
    """The lease-expiration alert needs the reconciler's counters, which live in its process."""
    import os
    import subprocess
    import sys
    import threading

    import httpx

    from docfence.testing.servers import free_port

    port = free_port()
    env = {**os.environ, "DOCFENCE_DATABASE_URL": f"sqlite:///{tmp_path}/docfence.db",
           "DOCFENCE_STORAGE_URL": f"file:{tmp_path}/objects"}
    env.pop("DOCFENCE_CONFIG", None)
    proc = subprocess.Popen([sys.executable, "-m", "docfence.cli", "reconcile", "--metrics-port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        text = ""
        for _ in range(600):  # start-up imports the engines; a loaded machine may take a while
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
                break
            except httpx.HTTPError:
                threading.Event().wait(0.1)
        assert "# TYPE docfence_lease_expirations_total counter" in text
        assert "# TYPE docfence_reclaims_total counter" in text and "docfence_store_up 1.0" in text
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()
