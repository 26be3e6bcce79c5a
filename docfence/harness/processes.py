"""Run a worker function in W fresh processes released together, and time them: shared by the queue
benchmark, the procrastinate baseline (so neither imports the other) and the concurrency tests."""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Callable
from typing import Any

from docfence.core.clock import monotonic

__all__ = ["run_processes"]


def run_processes(target: Callable[..., None], args_for: Callable[[int, Any], tuple[Any, ...]],
                  workers: int) -> float:
    """Start `workers` processes, release them together once all are ready, return the wall time
    until all exit (less the idle time each spends confirming the queue is empty)."""
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(workers + 1)  # every process has imported and connected before the clock starts
    procs = [ctx.Process(target=target, args=args_for(i, start)) for i in range(workers)]
    for p in procs:
        p.start()
    try:
        start.wait(timeout=120)  # a worker that died while starting must not hang the benchmark
    except threading.BrokenBarrierError:
        for p in procs:
            p.kill()
        raise RuntimeError("a bench worker did not start; see its error above") from None
    t0 = monotonic()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"bench worker exited with {p.exitcode}")
    return monotonic() - t0 - 0.5  # each worker idles 0.5 s before deciding the queue is empty
