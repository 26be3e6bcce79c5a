"""`docfence capacity`: workers needed for an arrival rate, page/byte/mode mix and p99 time-to-terminal."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from docfence.cli.errors import EXIT_USAGE, say


def register(sub: Any) -> None:
    p = sub.add_parser("capacity", help="plan workers by pages, bytes and mode (M/G/c model)")
    p.add_argument("--rate", type=float, required=True, help="arrivals per second (jobs)")
    p.add_argument("--mix", required=True,
                   help="mode:pages:share[:input_bytes],... e.g. vector:5:0.7,raster:20:0.3")
    p.add_argument("--p99", type=float, required=True, help="target p99 time to terminal, seconds")
    p.add_argument("--bench", default=None, help="JSON written by `python bench/watermark.py --json`")
    p.add_argument("--retry-factor", type=float, default=1.0, help="mean attempts per job (>= 1)")
    p.add_argument("--max-utilisation", type=float, default=0.85)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=capacity_cmd)


def capacity_cmd(args: argparse.Namespace) -> int:
    from docfence.observability.capacity import CostModel, cost_from_bench, parse_mix, plan

    try:
        mix = parse_mix(args.mix)
    except ValueError as exc:
        say(f"--mix={args.mix!r}: must be mode:pages:share[:input_bytes],... e.g. vector:5:0.7 ({exc})")
        return EXIT_USAGE
    try:
        cost = cost_from_bench(args.bench) if args.bench else CostModel()
    except (ValueError, KeyError, OSError) as exc:
        say(f"--bench={args.bench!r}: not a JSON file written by bench/watermark.py --json ({exc})")
        return EXIT_USAGE
    try:
        result = plan(args.rate, mix, args.p99, cost, retry_factor=args.retry_factor,
                      max_utilisation=args.max_utilisation)
    except (ValueError, KeyError) as exc:
        say(f"capacity: {exc}")
        return EXIT_USAGE
    if args.json:
        print(json.dumps(asdict(result), indent=2))
        return 0 if result.feasible else 1
    print(f"cost model: {result.cost_source}")
    for c in result.classes:
        print(f"  {c['share'] * 100:5.1f}%  {c['mode']:<6} {c['pages']:>5} pages {c['input_bytes']:>10} B"
              f"  -> {c['service_s']:.3f} s per attempt")
    print(f"offered load {result.offered_erlangs:.2f} worker-seconds/s "
          f"(mean service {result.mean_service_s:.3f} s)")
    print(f"workers needed: {result.workers}  (utilisation {result.utilisation:.0%}, "
          f"P(wait) {result.wait_probability:.2f}, mean wait {result.mean_wait_s:.2f} s)")
    print(f"time to terminal: p50 {result.p50_s:.2f} s, p99 {result.p99_s:.2f} s "
          f"(target {result.target_p99_s:g} s{'' if result.feasible else ': NOT MET'})")
    print("one worker process renders one job at a time: give each at least one CPU core")
    return 0 if result.feasible else 1
