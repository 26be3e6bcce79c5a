"""Enqueue benchmark: one-page jobs per second, one at a time against batches, in the same run, at the
store level and through the service (input upload included). One JSON object per store on stdout.

    .venv/bin/python bench/enqueue.py --store postgres|sqlite|both [--jobs 2000] [--batch 100]
                                      [--service-jobs 500]

The issue's target: >= 3,000 jobs/s enqueued on PostgreSQL in batches of 100 (store_level.batched_jobs_s).
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

from docfence.benchmarks.enqueue import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="postgres")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per measurement (default 2000)")
    parser.add_argument("--batch", type=int, default=100, help="jobs per batch (default 100)")
    parser.add_argument("--service-jobs", type=int, default=500,
                        help="jobs per measurement through the service (default 500; uploads fsync)")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    for kind in (["sqlite", "postgres"] if args.store == "both" else [args.store]):
        figures = run(kind, args.jobs, args.batch, args.service_jobs)
        figures["loadavg_1m_before"] = round(load, 2)
        figures["cpus"] = os.cpu_count()
        print(json.dumps(figures, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
