"""API load bench: a `python -m docfence.api` subprocess over SQLite, driven open-loop at a target rate
by an async httpx client (mostly GET status, some small submits); prints req/s and p50/p99 per kind.

    .venv/bin/python bench/api_load.py --json [--rate 200] [--duration 10] [--submit-fraction 0.1]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, bench/ is sys.path[0] and bench/queue.py would shadow the stdlib `queue` module.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx

from docfence.config import Settings
from docfence.core.clock import monotonic
from docfence.core.interpreter import module_command
from docfence.service import build_service

PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
GET_P99_TARGET_MS = 50.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def server(data: Path) -> Iterator[tuple[str, str]]:
    """Start the API in a subprocess over a fresh SQLite store; yields (base URL, API key)."""
    env = dict(os.environ, DOCFENCE_DATABASE_URL=f"sqlite:///{data}/docfence.db",
               DOCFENCE_STORAGE_URL=f"file://{data}/objects")
    settings = Settings(database_url=env["DOCFENCE_DATABASE_URL"], storage_url=env["DOCFENCE_STORAGE_URL"])
    service = build_service(settings)
    key = service.create_api_key("bench", ("submit", "read"), name="bench")[1]
    service.store.close()
    port = free_port()
    proc = subprocess.Popen(
        module_command("docfence.api", "--host", "127.0.0.1", "--port", str(port),
                       "--log-level", "warning"), env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, proc)
        yield base, key
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


READY_HANG_GUARD_S = 300.0  # start-up on a loaded machine can take a while; this only stops a hang


def _wait_ready(base: str, proc: subprocess.Popen[bytes]) -> None:
    """Until /readyz answers 200. A server that exits fails at once; the deadline is a hang guard."""
    until = monotonic() + READY_HANG_GUARD_S
    while monotonic() < until:
        if proc.poll() is not None:
            raise RuntimeError(f"the API server exited during start-up (code {proc.returncode})")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/readyz", timeout=10).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError("the API server did not become ready")


async def _one(http: httpx.AsyncClient, kind: str, job_ids: list[str], out: dict[str, list[Any]]) -> None:
    start = monotonic()
    try:
        if kind == "get":
            response = await http.get(f"/v1/jobs/{random.choice(job_ids)}")
        else:
            response = await http.post("/v1/jobs", files={"file": ("b.pdf", PDF + os.urandom(8))})
        ok = response.status_code < 400
    except httpx.HTTPError:
        ok = False
    out[kind].append(((monotonic() - start) * 1000.0, ok))


async def drive(base: str, key: str, rate: float, duration: float, submit_fraction: float) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"},
                                 limits=limits, timeout=30) as http:
        seed = [await http.post("/v1/jobs", files={"file": ("s.pdf", PDF + bytes([i]))}) for i in range(20)]
        job_ids = [r.json()["id"] for r in seed]
        for _ in range(50):  # warm the connection pool and the server's code paths
            await http.get(f"/v1/jobs/{job_ids[0]}")
        out: dict[str, list[Any]] = {"get": [], "submit": []}
        total, tasks = int(rate * duration), []
        t0 = monotonic()
        for i in range(total):
            delay = t0 + i / rate - monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            kind = "submit" if random.random() < submit_fraction else "get"
            tasks.append(asyncio.create_task(_one(http, kind, job_ids, out)))
        await asyncio.gather(*tasks)
        elapsed = monotonic() - t0
    return {"elapsed_s": elapsed, "samples": out}


def summarize(result: dict[str, Any], rate: float, duration: float) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    count = 0
    for kind, samples in result["samples"].items():
        latencies = sorted(ms for ms, _ in samples)
        count += len(samples)
        kinds[kind] = {
            "count": len(samples), "errors": sum(1 for _, ok in samples if not ok),
            "rps": round(len(samples) / result["elapsed_s"], 1),
            "p50_ms": round(_pct(latencies, 0.50), 2), "p99_ms": round(_pct(latencies, 0.99), 2),
            "max_ms": round(latencies[-1], 2) if latencies else 0.0,
        }
    get_p99 = kinds["get"]["p99_ms"]
    return {
        "bench": "api_load", "store": "sqlite", "target_rps": rate, "duration_s": duration,
        "achieved_rps": round(count / result["elapsed_s"], 1), "kinds": kinds,
        "get_p99_target_ms": GET_P99_TARGET_MS, "get_p99_ok": get_p99 < GET_P99_TARGET_MS,
    }


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second (open loop)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds")
    parser.add_argument("--submit-fraction", type=float, default=0.1)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default too)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="docfence-bench-") as tmp, server(Path(tmp)) as (base, key):
        raw = asyncio.run(drive(base, key, args.rate, args.duration, args.submit_fraction))
    print(json.dumps(summarize(raw, args.rate, args.duration)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
