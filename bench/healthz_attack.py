"""/healthz latency of a real `docfence serve` while it is attacked without a key: clients pumping large
bodies to POST /v1/report-requests, stalled unauthenticated uploads and stalled headers. Prints JSON:
latency percentiles with and without the attack and the server's peak RSS (target: p99 < 50 ms).

    .venv/bin/python bench/healthz_attack.py [--probes 200] [--pumps 4] [--stalled 50]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from docfence.config import Settings
from docfence.service import build_service
from docfence.testing.servers import serve_process

MB = 1024 * 1024


def _probe(base: str, n: int) -> dict[str, float]:
    samples = []
    with httpx.Client(base_url=base, timeout=30) as http:
        for _ in range(n):
            start = time.perf_counter()
            assert http.get("/healthz").status_code == 200
            samples.append((time.perf_counter() - start) * 1000)
            time.sleep(0.01)
    samples.sort()
    return {"p50_ms": round(statistics.median(samples), 2),
            "p99_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))], 2),
            "max_ms": round(samples[-1], 2), "n": n}


def _pump_forever(port: int, stop: threading.Event, counter: list[int]) -> None:
    """Open a connection, claim a 95 MB JSON body without a key, send until refused; again."""
    head = (f"POST /v1/report-requests HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {95 * MB}\r\n\r\n").encode()
    chunk = b"x" * (256 * 1024)
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(head)
                for _ in range(380):
                    sock.sendall(chunk)
        except OSError:
            pass
        counter[0] += 1


def _stalled(port: int, n: int) -> list[socket.socket]:
    socks = []
    for i in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i % 2:
            sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n")  # headers never finish
        else:
            sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
                         b"boundary=b\r\nContent-Length: 50000000\r\n\r\n--b\r\n")  # no key, stalls
        socks.append(sock)
    return socks


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return -1.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--pumps", type=int, default=4)
    parser.add_argument("--stalled", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/d.db", storage_url=f"file://{tmp}/objects")
        build_service(settings).store.close()
        env = dict(os.environ, DOCFENCE_DATABASE_URL=settings.database_url,
                   DOCFENCE_STORAGE_URL=settings.storage_url, TMPDIR=tmp)
        with serve_process(env, Path(tmp) / "server.log") as (proc, base):
            port = int(base.rsplit(":", 1)[1])
            idle = _probe(base, args.probes)
            stop, counter = threading.Event(), [0]
            pumps = [threading.Thread(target=_pump_forever, args=(port, stop, counter), daemon=True)
                     for _ in range(args.pumps)]
            for t in pumps:
                t.start()
            socks = _stalled(port, args.stalled)
            attacked = _probe(base, args.probes)
            stop.set()
            for sock in socks:
                sock.close()
            for t in pumps:
                t.join(30)
            print(json.dumps({"bench": "healthz_under_attack", "idle": idle, "attacked": attacked,
                              "attack_connections": counter[0] + args.stalled,
                              "server_peak_rss_mb": round(_peak_rss_mb(proc.pid), 1),
                              "target_p99_ms": 50}, indent=2))


if __name__ == "__main__":
    main()
