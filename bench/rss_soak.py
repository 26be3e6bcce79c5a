"""Resident memory of workers and zygotes after many jobs (the target, so that no job leaks: RSS after 5,000
jobs <= RSS after 100 jobs + 50 MB): one-page dense documents through a real `docfence serve` and real
workers, VmRSS and RssAnon of each worker and its zygote read at job-count checkpoints. Prints one JSON
object; never asserts on memory.

    .venv/bin/python bench/rss_soak.py [--store sqlite|postgres] [--jobs 5000] [--workers 2]
        [--pages 1] [--checkpoints 100,1000,2500]
"""

# ruff: noqa: E402  (sys.path is fixed before the imports below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import argparse
import json

from docfence.benchmarks.rss import run


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pages", type=int, default=1)
    parser.add_argument("--checkpoints", default="100,1000,2500")
    args = parser.parse_args()
    checkpoints = [int(c) for c in args.checkpoints.split(",") if c]
    print(json.dumps(run(args.store, args.jobs, args.workers, args.pages, checkpoints)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
