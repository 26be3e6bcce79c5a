"""Chaos soak (see docfence/benchmarks/chaos.py): bench/chaos.py --store sqlite --jobs 300 --workers 4
--kill-every 2 --json prints one JSON object."""

from __future__ import annotations

import argparse
import json

from docfence.benchmarks.chaos import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--standalone-reconciler", action="store_true",
                        help="also run one `docfence reconcile` process that is never killed")
    parser.add_argument("--json", action="store_true", help="print JSON (the only output format)")
    args = parser.parse_args()
    print(json.dumps(run(args.store, args.jobs, args.workers, args.kill_every, timeout_s=args.timeout,
                         standalone_reconciler=args.standalone_reconciler)))


if __name__ == "__main__":
    main()
