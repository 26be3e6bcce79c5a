"""Webhook delivery benchmark: N finished jobs' signed events delivered by one dispatcher to a real
loopback receiver that verifies every signature; deliveries/s and per-attempt latency. One JSON object
per store on stdout.

    .venv/bin/python bench/webhooks.py --store sqlite|postgres|both [--events 1000]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ is sys.path[0] and bench/queue.py would shadow the stdlib `queue` module.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from docfence.config import WebhooksConfig
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, Completion, NewJob
from docfence.harness.databases import temporary_pg_database
from docfence.maintenance.webhook_endpoints import WebhookEndpoints
from docfence.maintenance.webhooks import WebhookDispatcher
from docfence.store import open_store
from docfence.testing.webhook_receiver import Receiver, receiving

CONFIG = WebhooksConfig(allow_hosts=("127.0.0.1",), batch=100)


@contextmanager
def _store_url(kind: str) -> Iterator[str]:
    if kind == "postgres":
        with temporary_pg_database("docfence_bench_webhooks") as url:
            yield url
    else:
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/bench.db"


def run(kind: str, events: int) -> dict[str, Any]:
    receiver = Receiver(secret="")
    with _store_url(kind) as url, receiving(receiver) as hook:
        store = open_store(url)
        receiver.secret = WebhookEndpoints(store, CONFIG).create("t1", hook, ["*"], actor="bench").secret
        for start in range(0, events, 100):
            for _ in range(min(100, events - start)):
                store.submit(NewJob(tenant="t1", policy=JobPolicy()))
            claims = store.claim("w1", limit=100)
            store.complete_many([Completion(c.job.id, c.attempt, ArtifactInfo(
                f"k/{c.job.id}", "ab" * 32, 1000, 1, {"ok": True})) for c in claims], "w1")
        dispatcher = WebhookDispatcher(store, CONFIG, worker="bench")
        started = time.perf_counter()
        delivered = 0
        while delivered < events:
            result = dispatcher.run_once()
            if not (result.delivered or result.retried):
                break
            delivered += len(result.delivered)
        seconds = time.perf_counter() - started
        latencies = []
        for job in store.list_jobs(limit=min(events, 200)):
            latencies += [a.latency_ms for a in store.webhook_activity(job.id).attempts if a.latency_ms]
        store.close()
    return {"store": kind, "events": events, "delivered": delivered,
            "received_unique": len(receiver.payloads), "bad_signatures": receiver.bad_signatures,
            "deliveries_per_s": round(delivered / seconds, 1),
            "attempt_latency_ms_p50": round(statistics.median(latencies), 2),
            "attempt_latency_ms_p99": round(statistics.quantiles(latencies, n=100)[98], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--events", type=int, default=1000)
    args = parser.parse_args(argv)
    for kind in (["sqlite", "postgres"] if args.store == "both" else [args.store]):
        load = os.getloadavg()[0]
        figures = run(kind, args.events)
        figures.update(loadavg_1m_before=round(load, 2), cpus=os.cpu_count())
        print(json.dumps(figures, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
