"""Capacity planning: workers needed for an arrival rate, a page/byte/mode mix and a p99 time-to-terminal.

Render cost is linear in pages per mode (fitted from `bench/watermark.py --json`, or the defaults below,
measured on the 2-core development machine), plus per-job overhead and I/O by bytes. Each worker renders
one job at a time, so the system is an M/G/c queue: Erlang C gives the mean wait, a seeded simulation of the
same queue gives the p99 (Erlang C alone says nothing about the tail of a mixed page distribution).
"""

from __future__ import annotations

import heapq
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Measured 2026-11-29 with `bench/watermark.py --json --quick` (vector and raster 150 DPI, full validation):
# vector 63 pages/s on 1 page, 361 on 20, 525 on 200; raster 14.7 pages/s on 1 page, 18.0 on 20.
DEFAULT_COST = {"vector": (0.019, 0.00181), "raster": (0.013, 0.0549)}  # (fixed s, s per page)
JOB_OVERHEAD_S = 0.15  # child start, claim, staging upload, fenced commit (measured ~0.1-0.2 s on SQLite)
IO_BYTES_PER_S = 200e6  # input read + output write to local storage


@dataclass(frozen=True)
class JobClass:
    """One slice of the workload: `share` of arrivals have this mode, page count and input size."""

    mode: str
    pages: int
    share: float
    input_bytes: int = 0

    def __post_init__(self) -> None:
        if self.mode not in DEFAULT_COST or self.pages < 1 or self.share <= 0 or self.input_bytes < 0:
            raise ValueError(f"bad job class {self}")


@dataclass(frozen=True)
class CostModel:
    per_mode: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_COST))
    overhead_s: float = JOB_OVERHEAD_S
    io_bytes_per_s: float = IO_BYTES_PER_S
    source: str = "defaults measured on the development machine"

    def service_s(self, job: JobClass) -> float:
        fixed, per_page = self.per_mode[job.mode]
        output_bytes = job.input_bytes * (3 if job.mode == "raster" else 1)
        io_s = (job.input_bytes + output_bytes) / self.io_bytes_per_s
        return self.overhead_s + fixed + per_page * job.pages + io_s


def cost_from_bench(path: str | Path) -> CostModel:
    """Fit (fixed, per page) per mode from the validated rows of `bench/watermark.py --json` output."""
    report = json.loads(Path(path).read_text("utf-8"))
    rows = report["pages_per_second"]
    fitted: dict[str, tuple[float, float]] = {}
    for mode, key in (("vector", "vector_validated"), ("raster", "raster_150dpi_validated")):
        points = [(r["pages"], r["pages"] / r[key]) for r in rows if r.get(key)]
        fitted[mode] = _fit(points) if points else DEFAULT_COST[mode]
    return CostModel(per_mode=fitted, source=str(path))


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares seconds = fixed + per_page * pages (both clamped at >= 0)."""
    if len(points) == 1:
        pages, secs = points[0]
        return 0.0, secs / pages
    n = len(points)
    mx, my = sum(p for p, _ in points) / n, sum(s for _, s in points) / n
    var = sum((p - mx) ** 2 for p, _ in points)
    slope = sum((p - mx) * (s - my) for p, s in points) / var if var else my / mx
    return max(0.0, my - slope * mx), max(1e-6, slope)


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in M/M/c with `offered` = lambda * E[S] Erlangs."""
    if offered >= servers:
        return 1.0
    term, total = 1.0, 1.0
    for k in range(1, servers):
        term *= offered / k
        total += term
    last = term * offered / servers / (1 - offered / servers)
    return last / (total + last)


@dataclass(frozen=True)
class Plan:
    workers: int
    arrival_rate: float
    mean_service_s: float
    offered_erlangs: float
    utilisation: float
    wait_probability: float
    mean_wait_s: float  # Erlang C scaled by (1 + cs^2)/2 (Allen-Cunneen)
    p50_s: float  # simulated time to terminal
    p99_s: float
    target_p99_s: float
    classes: list[dict[str, Any]]
    cost_source: str
    feasible: bool


def simulate(workers: int, rate: float, mix: list[JobClass], cost: CostModel, *, jobs: int = 60_000,
             seed: int = 7, retry_factor: float = 1.0) -> list[float]:
    """FCFS M/G/c: sorted times from arrival to finish of `jobs` Poisson arrivals."""
    rng = random.Random(seed)
    shares = [c.share for c in mix]
    services = [cost.service_s(c) * retry_factor for c in mix]
    free = [0.0] * workers
    now, out = 0.0, []
    for _ in range(jobs):
        now += rng.expovariate(rate)
        service = services[rng.choices(range(len(mix)), shares)[0]] * rng.lognormvariate(0.0, 0.25)
        start = max(now, heapq.heappop(free))
        heapq.heappush(free, start + service)
        out.append(start + service - now)
    out.sort()
    return out


def plan(rate: float, mix: list[JobClass], target_p99_s: float, cost: CostModel | None = None, *,
         retry_factor: float = 1.0, max_workers: int = 512, max_utilisation: float = 0.85,
         sim_jobs: int = 40_000) -> Plan:
    """The fewest workers whose simulated p99 time-to-terminal meets the target with utilisation at most
    `max_utilisation` (headroom for retries and restarts), up to max_workers."""
    if rate <= 0 or target_p99_s <= 0 or not mix:
        raise ValueError("rate and target must be positive and the mix non-empty")
    cost = cost or CostModel()
    total = sum(c.share for c in mix)
    mix = [JobClass(c.mode, c.pages, c.share / total, c.input_bytes) for c in mix]
    mean = sum(c.share * cost.service_s(c) for c in mix) * retry_factor
    second = sum(c.share * cost.service_s(c) ** 2 for c in mix) * retry_factor**2
    offered = rate * mean
    workers = max(1, math.floor(offered) + 1, math.ceil(offered / max_utilisation))
    while True:
        times = simulate(workers, rate, mix, cost, jobs=sim_jobs, retry_factor=retry_factor)
        p99 = times[int(len(times) * 0.99)]
        if p99 <= target_p99_s or workers >= max_workers:
            break
        workers += max(1, workers // 8)
    cs2 = second / (mean * mean) - 1
    pw = erlang_c(workers, offered)
    wait = pw * mean / (workers - offered) * (1 + cs2) / 2 if offered < workers else math.inf
    classes = [{"mode": c.mode, "pages": c.pages, "share": round(c.share, 4), "input_bytes": c.input_bytes,
                "service_s": round(cost.service_s(c), 4)} for c in mix]
    return Plan(workers, rate, mean, offered, offered / workers, pw, wait, times[len(times) // 2], p99,
                target_p99_s, classes, cost.source, p99 <= target_p99_s)


def parse_mix(text: str) -> list[JobClass]:
    """`vector:5:0.7,raster:20:0.3[:bytes]` -> job classes (mode:pages:share[:input bytes])."""
    mix = []
    for part in text.split(","):
        fields = part.strip().split(":")
        if len(fields) not in (3, 4):
            raise ValueError(f"mix entry {part!r} must be mode:pages:share[:input_bytes]")
        mix.append(JobClass(fields[0], int(fields[1]), float(fields[2]),
                            int(fields[3]) if len(fields) == 4 else 0))
    return mix
