"""Other tenants' latency while one tenant sends report requests whose data check is as costly as the
static bounds allow (each runs into its CPU budget and answers 422 render_resource_exceeded).

A real uvicorn server on loopback over SQLite (in this process, as the API tests run it); the victim
tenant loops, one request at a time, over an authenticated GET of a report request and a POST of a
small new report request; phase "alone" without the attacker, phase "attacked" with `--attackers`
threads posting costly requests. Prints JSON: p50/p95/max in ms per phase and kind, the attacker's
answers.

    .venv/bin/python bench/report_data_cost.py [--duration 15] [--attackers 4]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from docfence.api import create_app
from docfence.config import Settings
from docfence.service import build_service
from docfence.store.base import open_store
from docfence.testing.servers import running

COSTLY_SCHEMA = {"type": "object", "properties": {"xs": {"type": "array", "items": {
    "allOf": [{"type": "integer", "minimum": i % 7} for i in range(2000)]}}}}
PLAIN_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(ms[int(len(ms) * 0.95) - 1], 1), "max_ms": round(ms[-1], 1)}


def _victim(client: httpx.Client, headers: dict[str, str], request_id: str, until: float,
            counter: itertools.count[int]) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {"get": [], "post": []}
    while time.perf_counter() < until:
        started = time.perf_counter()
        assert client.get(f"/v1/report-requests/{request_id}", headers=headers).status_code == 200
        got["get"].append(time.perf_counter() - started)
        body = {"subject": f"s{next(counter)}", "period": "2026-01", "template": "plain@1", "data": {"n": 1}}
        started = time.perf_counter()
        assert client.post("/v1/report-requests", json=body, headers=headers).status_code == 201
        got["post"].append(time.perf_counter() - started)
    return got


def _attacker(base: str, headers: dict[str, str], stop: threading.Event, answers: Counter[str],
              latencies: list[float]) -> None:
    body = {"subject": "x", "period": "2026-01", "template": "costly@1", "data": {"xs": [7] * 150_000}}
    with httpx.Client(base_url=base, timeout=120) as client:
        while not stop.is_set():
            started = time.perf_counter()
            answer = client.post("/v1/report-requests", json=body, headers=headers)
            latencies.append(time.perf_counter() - started)
            answers[f"{answer.status_code} {answer.json().get('error', {}).get('code', '')}"] += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--attackers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{Path(tmp)}/db.sqlite", storage_url=f"file:{tmp}/obj")
        store = open_store(settings.database_url)
        service = build_service(settings, store)
        key = {"Authorization": f"Bearer {service.create_api_key('victim', ('admin', 'submit', 'read'))[1]}"}
        evil = {"Authorization": f"Bearer {service.create_api_key('evil', ('admin', 'submit', 'read'))[1]}"}
        result: dict[str, Any] = {"attackers": args.attackers, "duration_s": args.duration}
        with running(create_app(settings, service=service)) as base, \
                httpx.Client(base_url=base, timeout=120) as client:
            for tid, schema, who in (("plain", PLAIN_SCHEMA, key), ("costly", COSTLY_SCHEMA, evil)):
                made = client.post("/v1/templates", json={"id": tid, "html": "<p/>", "schema": schema},
                                   headers=who)
                assert made.status_code == 201, made.text
            first = client.post("/v1/report-requests", headers=key, json={
                "subject": "first", "period": "2026-01", "template": "plain@1", "data": {"n": 1}}).json()
            counter = itertools.count()
            alone = _victim(client, key, first["id"], time.perf_counter() + args.duration, counter)
            stop, answers, latencies = threading.Event(), Counter[str](), []
            threads = [threading.Thread(target=_attacker, args=(base, evil, stop, answers, latencies))
                       for _ in range(args.attackers)]
            for thread in threads:
                thread.start()
            attacked = _victim(client, key, first["id"], time.perf_counter() + args.duration, counter)
            stop.set()
            for thread in threads:
                thread.join()
        store.close()
    result["alone"] = {kind: _summary(v) for kind, v in alone.items()}
    result["attacked"] = {kind: _summary(v) for kind, v in attacked.items()}
    result["attacker"] = {"answers": dict(answers), **_summary(latencies)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
