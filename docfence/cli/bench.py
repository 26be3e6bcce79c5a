"""`docfence bench queue|service`: measured throughput of the job protocol (queue) and of the whole
service on real documents (service), each printed as one JSON object."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("bench", help="run a benchmark and print its figures as JSON")
    bench_sub = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    queue = bench_sub.add_parser("queue", help="no-op jobs through the full protocol, with baselines")
    queue.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    queue.add_argument("--jobs", type=int, default=2000)
    queue.add_argument("--workers", type=int, default=4)
    queue.add_argument("--batch", type=int, default=10, help="jobs claimed per claim call")
    queue.add_argument("--backlog", type=int, default=0,
                       help="finished jobs already in the table (checks the claim stays on its index)")
    queue.add_argument("--no-baselines", action="store_true", help="skip the raw-SQL and procrastinate runs")
    queue.add_argument("--json", action="store_true", help="print JSON only (the default output too)")
    queue.set_defaults(func=run_queue)
    service = bench_sub.add_parser("service", help="dense documents through HTTP and real workers, "
                                   "beside the engine alone and a qpdf --overlay loop")
    service.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    service.add_argument("--jobs", type=int, default=200)
    service.add_argument("--workers", type=int, default=2)
    service.add_argument("--pages", type=int, default=1, help="pages per document")
    service.add_argument("--latency", action="store_true",
                         help="one job at a time: submit -> ?wait= -> download, p50/p99")
    service.add_argument("--json", action="store_true", help="print JSON only (the default output too)")
    service.set_defaults(func=run_service)


def run_queue(args: argparse.Namespace) -> int:
    from docfence.benchmarks.queue import run

    result = run(args.store, args.jobs, args.workers, batch=args.batch, backlog=args.backlog,
                 baselines=not args.no_baselines)
    print(json.dumps(result))
    return 0


def run_service(args: argparse.Namespace) -> int:
    from docfence.benchmarks.service import run

    result = run(args.store, args.jobs, args.workers, args.pages, latency=args.latency)
    print(json.dumps(result))
    return 0
