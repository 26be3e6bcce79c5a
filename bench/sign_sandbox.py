"""The sign sandbox (its own zygote, because the signing key must not share a zygote with
untrusted work): its zygote's resident memory once ready, and what one sign task costs in its render process
(CPU ms per step as the child reports them: "before" = the fork's copy-on-write, "setup", "task";
minor page faults), over generated 1-page documents signed with a throwaway CA's key.

Usage: python bench/sign_sandbox.py [--tasks N]
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]  # bench/queue.py shadows queue

import argparse
import json
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any

from docfence.core.policy import JobPolicy, SigningSpec
from docfence.engines.signing import SigningKey
from docfence.samples import pdfs
from docfence.sandbox import Sandbox, Task
from docfence.testing.signing_ca import make_test_ca


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    args = parser.parse_args()
    made = make_test_ca()
    key = SigningKey.from_pkcs12(made.pkcs12, made.password).to_request()
    policy = JobPolicy(signing=SigningSpec())
    folder = Path(tempfile.mkdtemp(prefix="bench-sign-"))
    src = folder / "in.pdf"
    src.write_bytes(pdfs.many_pages(1))
    steps: dict[str, list[float]] = {}
    faults: list[int] = []
    with Sandbox("sign") as box:
        box.start()
        assert box.zygote_pid is not None
        ready_rss = rss_mb(box.zygote_pid)
        for n in range(args.tasks):
            outcome = box.run(Task("sign", src, folder / f"out{n}.pdf", policy, signing=key))
            if not outcome.ok:
                raise SystemExit(f"sign task failed: {outcome.error_code}")
            for step, ms in outcome.process["cpu_ms"].items():
                steps.setdefault(step, []).append(ms)
            faults.append(sum(outcome.process["minflt"].values()))
    result: dict[str, Any] = {
        "machine": platform.machine(), "cpus": os.cpu_count(),
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        "tasks": args.tasks, "sign_zygote_rss_mb": ready_rss,
        "render_process_cpu_ms_median": {k: round(statistics.median(v), 1) for k, v in steps.items()},
        "render_process_minflt_median": statistics.median(faults)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
