"""Envelope encryption benchmark (docfence.blobs.envelope + the local key provider): what sealing and
opening objects costs. Prints one JSON object:
- `throughput`: MB/s sealing a generated stream and opening it again (in memory: no disk in the figure);
- `one_page_job`: every encryption step one job pays on a ~50 KB PDF (data key generated and wrapped,
  input sealed at submission; key unwrapped, input opened, output sealed by the worker; key unwrapped and
  artifact opened by a download), against the target of <= 2 ms for the job's steps;
- `dense_2000_pages`: the same steps on the dense 2,000-page document's bytes (docfence.benchmarks.dense,
  or `--dense PATH`), as a share of that job's time (`--dense-job-s`, default the CLI figure in
  docs/benchmarks.md), against the target of <= 5 %;
- `rss`: peak RSS of a fresh process that seals a generated 500 MB stream and opens it again as it
  is produced (target < 100 MB), and of one that only seals it.
Wall and CPU (getrusage) milliseconds both: on a loaded machine the CPU figures are the comparable ones.

Usage: python bench/encryption.py [--repeat N] [--throughput-mb N] [--rss-mb N] [--chunk-size B]
       [--dense PATH] [--dense-job-s S] [--quick]
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # bench/queue.py shadows queue

import argparse
import hashlib
import io
import json
import platform
import resource
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docfence.blobs.envelope import (
    DEFAULT_CHUNK_SIZE,
    DataKey,
    SealingReader,
    open_bytes,
    open_chunks,
    seal_bytes,
    seal_stream,
)
from docfence.blobs.kek.local import KEK_FILE, LocalKeyProvider
from docfence.core.clock import monotonic

ONE_PAGE_BYTES = 50 * 1024
ONE_PAGE_TARGET_MS = 2.0
DENSE_TARGET_PCT = 5.0
RSS_TARGET_MB = 100.0
DENSE_JOB_S = 38.7  # docs/benchmarks.md: `docfence watermark` CLI, 2,000 dense pages, vector, validated
MB = 1024 * 1024
CONTEXT = {"tenant": "bench", "job": "01JBENCH0000000000000000000"}


class Generated:
    """A stream of `size` bytes made as it is read, never held whole (64 KiB of sha256 output repeated)."""

    def __init__(self, size: int) -> None:
        self._left, self._block = size, hashlib.sha256(b"bench").digest() * 2048

    def read(self, size: int = -1, /) -> bytes:
        n = min(self._left, len(self._block) if size < 0 else min(size, len(self._block)))
        self._left -= n
        return self._block[:n]


class Discard:
    def __init__(self) -> None:
        self.count = 0

    def write(self, data: bytes, /) -> int:
        self.count += len(data)
        return len(data)


def cpu_ms() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return (used.ru_utime + used.ru_stime) * 1000


def timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for _ in range(repeat):
        started, cpu_started = monotonic(), cpu_ms()
        fn()
        wall.append((monotonic() - started) * 1000)
        cpu.append(cpu_ms() - cpu_started)
    return wall, cpu


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def throughput(size_mb: int, chunk_size: int, repeat: int) -> dict[str, Any]:
    key, size = DataKey.generate(), size_mb * MB
    sealed = io.BytesIO()
    seal_stream(Generated(size), sealed, key, "bench/throughput", chunk_size=chunk_size)
    blob = sealed.getvalue()
    seal_wall, seal_cpu = timed(lambda: seal_stream(Generated(size), Discard(), key, "bench/throughput",
                                                    chunk_size=chunk_size), repeat)
    open_wall, open_cpu = timed(lambda: sum(len(c) for c in open_chunks(io.BytesIO(blob), key,
                                                                        "bench/throughput")), repeat)
    rate = lambda ms: round(size / MB / (statistics.median(ms) / 1000), 1)  # noqa: E731
    return {"mb": size_mb, "chunk_size": chunk_size,
            "seal_mb_s": rate(seal_wall), "open_mb_s": rate(open_wall),
            "seal_mb_s_cpu": rate(seal_cpu), "open_mb_s_cpu": rate(open_cpu)}


def job_steps(data: bytes, provider: LocalKeyProvider, repeat: int, chunk: int) -> dict[str, Any]:
    """Each encryption step of one job on `data` (the output taken to be the input's size), in ms."""
    key, wrapped = provider.generate(CONTEXT)
    sealed = seal_bytes(data, key, "jobs/bench/j/input.pdf", chunk_size=chunk)
    steps: dict[str, Callable[[], Any]] = {
        "submit_generate_and_wrap_key": lambda: provider.generate(CONTEXT),
        "submit_seal_input": lambda: seal_bytes(data, key, "jobs/bench/j/input.pdf", chunk_size=chunk),
        "worker_unwrap_key": lambda: provider.unwrap(wrapped, CONTEXT),
        "worker_open_input": lambda: open_bytes(sealed, key, "jobs/bench/j/input.pdf"),
        "worker_seal_output": lambda: seal_bytes(data, key, "jobs/bench/j/attempts/1/output.pdf",
                                                 chunk_size=chunk),
        "download_unwrap_key": lambda: provider.unwrap(wrapped, CONTEXT),
        "download_open_artifact": lambda: open_bytes(sealed, key, "jobs/bench/j/input.pdf"),
    }
    out: dict[str, Any] = {"bytes": len(data), "steps_ms": {}, "steps_cpu_ms": {}}
    job_wall, job_cpu = 0.0, 0.0
    for name, step in steps.items():
        wall, cpu = timed(step, repeat)
        out["steps_ms"][name], out["steps_cpu_ms"][name] = median(wall), median(cpu)
        if not name.startswith("download"):
            job_wall, job_cpu = job_wall + statistics.median(wall), job_cpu + statistics.median(cpu)
    out["job_ms"], out["job_cpu_ms"] = round(job_wall, 3), round(job_cpu, 3)
    return out


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM). Not ru_maxrss: Linux carries that across exec from the parent."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def rss_child(size_mb: int, mode: str) -> dict[str, Any]:
    """In this (fresh) process: seal `size_mb` MB (and open it again as it is produced, for
    `round-trip`); peak RSS before and after."""
    key = DataKey.generate()
    before = peak_rss_mb()
    started = monotonic()
    if mode == "seal":
        info = seal_stream(Generated(size_mb * MB), Discard(), key, "bench/rss")
        plain = info.plaintext_bytes
    else:
        reader = SealingReader(Generated(size_mb * MB), key, "bench/rss")
        plain = sum(len(c) for c in open_chunks(reader, key, "bench/rss"))
    assert plain == size_mb * MB
    peak = peak_rss_mb()
    return {"mode": mode, "mb": size_mb, "peak_rss_mb_before": round(before, 1),
            "peak_rss_mb": round(peak, 1), "seconds": round(monotonic() - started, 2)}


def rss(size_mb: int) -> dict[str, Any]:
    out: dict[str, Any] = {"target_mb": RSS_TARGET_MB}
    for mode in ("seal", "round-trip"):
        answer = subprocess.run([sys.executable, os.path.abspath(__file__), "--rss-child", str(size_mb),
                                 "--rss-mode", mode], capture_output=True, text=True, check=True, timeout=900)
        out[mode] = json.loads(answer.stdout)
    out["meets_target"] = all(out[m]["peak_rss_mb"] < RSS_TARGET_MB for m in ("seal", "round-trip"))
    return out


def dense_bytes(path: str | None) -> tuple[str, bytes]:
    if path:
        return path, Path(path).read_bytes()
    from docfence.benchmarks.dense import dense_pdf

    return "docfence.benchmarks.dense.dense_pdf(2000)", dense_pdf(2000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--throughput-mb", type=int, default=64)
    parser.add_argument("--rss-mb", type=int, default=500)
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    parser.add_argument("--dense", help="the dense 2,000-page PDF (default: generated in memory)")
    parser.add_argument("--dense-job-s", type=float, default=DENSE_JOB_S)
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (a smoke run)")
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rss-mode", default="seal", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        print(json.dumps(rss_child(args.rss_child, args.rss_mode)))
        return 0
    if args.quick:
        args.repeat, args.throughput_mb, args.rss_mb = 5, 8, 32
    with tempfile.TemporaryDirectory() as tmp:
        provider = LocalKeyProvider(Path(tmp) / KEK_FILE)
        page = hashlib.sha256(b"page").digest() * (ONE_PAGE_BYTES // 32)
        one_page = job_steps(page, provider, args.repeat, args.chunk_size)
        name, dense = dense_bytes(args.dense)
        dense_steps = job_steps(dense, provider, max(3, args.repeat // 5), args.chunk_size)
    one_page["target_ms"] = ONE_PAGE_TARGET_MS
    one_page["meets_target"] = one_page["job_cpu_ms"] <= ONE_PAGE_TARGET_MS
    dense_steps.update(document=name, job_s=args.dense_job_s, target_pct=DENSE_TARGET_PCT,
                       pct_of_job=round(dense_steps["job_ms"] / 10 / args.dense_job_s, 3))
    dense_steps["meets_target"] = dense_steps["pct_of_job"] <= DENSE_TARGET_PCT
    report = {"bench": "encryption", "chunk_size": args.chunk_size, "repeat": args.repeat,
              "machine": {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2),
                          "python": platform.python_version()},
              "throughput": throughput(args.throughput_mb, args.chunk_size, max(3, args.repeat // 10)),
              "one_page_job": one_page, "dense_2000_pages": dense_steps, "rss": rss(args.rss_mb)}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
