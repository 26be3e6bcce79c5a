"""The sandbox alone: CPU per job of `Sandbox.run` on one dense P-page document, N times in a row, against
the engine alone on the same document in this process. CPU from /proc (self, the zygote, the zygote's
reaped render processes) and from each render process's own checkpoints (the answer's `process` entry:
fork as seen by the child, setup, task, subprocesses, minor faults), so the overhead can be located
on a loaded machine, where wall time says little. Prints one JSON object; never asserts on time.

Usage: python bench/sandbox_loop.py [--jobs N] [--pages P] [--profile all|watermark|report]
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from docfence.benchmarks.dense import dense_pdf
from docfence.benchmarks.service import _engine_loop
from docfence.config import load_settings
from docfence.sandbox import Sandbox, Task

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_ms(pid: int) -> tuple[float, float]:
    """(own utime + stime, reaped children's cutime + cstime) of `pid`, in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) * 1000 / TICK
    return own, (int(fields[13]) + int(fields[14])) * 1000 / TICK


def _settle(zygote: int, guard_s: float = 300.0) -> None:
    """Until the idle zygote uses no more CPU (its deferred warm-up steps are done)."""
    last, end = _cpu_ms(zygote)[0], time.monotonic() + guard_s
    while time.monotonic() < end:
        time.sleep(1.0)
        now = _cpu_ms(zygote)[0]
        if now == last:
            return
        last = now


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--pages", type=int, default=1)
    parser.add_argument("--profile", default="watermark")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    doc = dense_pdf(args.pages)
    policy = load_settings().policy_for(None)
    wall, engine_cpu, _ = _engine_loop(doc, policy.to_dict(), 15)
    with tempfile.TemporaryDirectory() as tmp, Sandbox(args.profile) as sandbox:
        source, output = Path(tmp) / "in.pdf", Path(tmp) / "out.pdf"
        source.write_bytes(doc)
        sandbox.start()
        zygote = sandbox.zygote_pid
        assert zygote is not None
        _settle(zygote)  # the idle-time warm-up steps are not job cost
        for _ in range(3):
            sandbox.run(Task("watermark", source, output, policy))
        zygote_before, me_before = _cpu_ms(zygote), os.times()
        steps = []
        for _ in range(args.jobs):
            outcome = sandbox.run(Task("watermark", source, output, policy))
            if not outcome.ok:
                raise SystemExit(f"job failed: {outcome.error_code}")
            steps.append(outcome.process)
        zygote_after, me_after = _cpu_ms(zygote), os.times()
    n = args.jobs
    supervisor = ((me_after.user + me_after.system) - (me_before.user + me_before.system)) * 1000 / n
    zygote_own = (zygote_after[0] - zygote_before[0]) / n
    children = (zygote_after[1] - zygote_before[1]) / n

    def median(measure: str) -> dict[str, float]:
        return {step: round(statistics.median(s[measure][step] for s in steps), 2)
                for step in steps[0][measure]}

    print(json.dumps({
        "bench": "sandbox_loop", "jobs": n, "pages": args.pages, "profile": args.profile,
        "load_before": load_before, "load_after": os.getloadavg()[0],
        "engine_alone": {"wall_ms_p50": round(wall * 1000, 1), "cpu_ms_per_job": round(engine_cpu * 1000, 1)},
        "cpu_ms_per_job": {"supervisor": round(supervisor, 1), "zygote": round(zygote_own, 1),
                           "render_processes_with_their_subprocesses": round(children, 1)},
        "overhead_cpu_ms_per_job": round(supervisor + zygote_own + children - engine_cpu * 1000, 1),
        "render_process_steps_p50": {measure: median(measure)
                                     for measure in ("cpu_ms", "subprocess_cpu_ms", "minflt")},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
