"""Resident memory of the long-lived processes over many jobs: real one-page dense documents through a
real `docfence serve` and real `docfence worker` processes (as `docfence bench service` runs them), the
resident set (VmRSS, RssAnon) of every worker and its zygote read at job-count checkpoints. A leak in a
worker or zygote shows as growth between the first and the last checkpoint. Prints one JSON object;
never asserts on memory."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import httpx

from docfence.benchmarks.dense import dense_pdf
from docfence.benchmarks.service import _children, _comm, _server, _submit_and_wait, _workers, bench_setup

BATCH = 100  # jobs submitted and waited for at a time


def run(store: str, jobs: int, workers: int, pages: int, checkpoints: list[int]) -> dict[str, Any]:
    """Submit `jobs` jobs in batches of BATCH; read every process's memory at each checkpoint."""
    marks = sorted({c for c in checkpoints if 0 < c <= jobs} | {jobs})
    with bench_setup(store) as (tmp, _, env, key):
        doc = dense_pdf(pages)
        result: dict[str, Any] = {"bench": "rss", "store": store, "jobs": jobs, "workers": workers,
                                  "pages": pages, "load_before": os.getloadavg()[0], "checkpoints": []}
        with _server(env, tmp / "serve.log") as (base, _), _workers(env, tmp, workers) as procs, \
                httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            done = 0
            for mark in marks:
                while done < mark:
                    batch = min(BATCH, mark - done)
                    _submit_and_wait(http, [doc] * batch)
                    done += batch
                result["checkpoints"].append({"jobs": done, "processes": _memory(procs)})
        result["growth_mb"] = _growth(result["checkpoints"], first=marks[0])
        result["load_after"] = os.getloadavg()[0]
        return result


def _memory(procs: list[Any]) -> list[dict[str, Any]]:
    """Per worker: its own and its zygote's memory (MB), read while both run."""
    out = []
    for proc in procs:
        zygotes = [c for c in _children(proc.pid) if _comm(c) == "docfence-zygote"]
        out.append({"worker": _status_mb(proc.pid),
                    "zygote": _status_mb(zygotes[0]) if zygotes else None,
                    "zygote_pid": zygotes[0] if zygotes else None})
    return out


def _status_mb(pid: int) -> dict[str, float]:
    found: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "VmHWM"):
                found[name] = round(int(value.split()[0]) / 1024, 1)
    return found


def _growth(checkpoints: list[dict[str, Any]], first: int) -> list[dict[str, Any]]:
    """VmRSS at the last checkpoint minus VmRSS at `first` jobs, per worker and zygote. A zygote that
    was restarted in between (another pid) is reported, not compared."""
    start = next(c for c in checkpoints if c["jobs"] == first)["processes"]
    end = checkpoints[-1]["processes"]
    out = []
    for a, b in zip(start, end, strict=True):
        entry: dict[str, Any] = {"worker": round(b["worker"]["VmRSS"] - a["worker"]["VmRSS"], 1)}
        same = a["zygote_pid"] is not None and a["zygote_pid"] == b["zygote_pid"]
        entry["zygote"] = round(b["zygote"]["VmRSS"] - a["zygote"]["VmRSS"], 1) if same else "restarted"
        out.append(entry)
    return out
