"""Fault benchmark (docfence/harness/fault_*.py): each scenario run N times with real `serve`, `worker`
and `reconcile` processes; prints one JSON object: per scenario and store, the runs, how many held both
promises, accepted jobs lost, stale publishes, the worst overrun of a deadline, and the partition's
detection and recovery times.

    bench/faults.py --runs 10 --scenario partition_in_tx --store postgres
    bench/faults.py --runs 1 --scenario all --soak
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docfence.core.clock import monotonic, utcnow
from docfence.harness import fault_outages as outages
from docfence.harness import fault_scenarios as scenarios
from docfence.harness.fault_runs import Verdict

Scenario = Callable[..., Verdict]

#: name -> (run, the stores it is meaningful on, extra keyword arguments)
SCENARIOS: dict[str, tuple[Scenario, tuple[str, ...], dict[str, str]]] = {
    "sigstop": (scenarios.sigstop, ("sqlite", "postgres"), {}),
    "partition_outside_tx": (scenarios.partition_outside_transaction, ("postgres",), {}),
    "partition_in_tx": (scenarios.partition_in_transaction, ("postgres",), {}),
    "lost_answer": (scenarios.lost_answer, ("postgres",), {}),
    "pg_restart": (outages.pg_restart, ("postgres",), {}),
    "storage_outage_local": (outages.storage_outage, ("sqlite", "postgres"), {"blobs": "local"}),
    "storage_outage_s3": (outages.storage_outage, ("sqlite", "postgres"), {"blobs": "s3"}),
    "poison_job": (scenarios.poison_job, ("sqlite", "postgres"), {}),
}


def run_one(name: str, store: str, soak: bool) -> Verdict:
    run, _, extra = SCENARIOS[name]
    root = Path(tempfile.mkdtemp(prefix=f"docfence-faults-{name}-"))
    try:
        return run(root, store, soak=soak, **extra)
    except Exception as exc:  # a run that broke is a run that did not hold; say why and go on
        verdict = Verdict(name, store)
        verdict.problems.append(f"the run raised {type(exc).__name__}: {exc}")
        return verdict
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _worst(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def summary(verdicts: list[Verdict]) -> dict[str, Any]:
    figures = sorted({k for v in verdicts for k in v.figures})
    return {
        "runs": len(verdicts), "held": sum(v.held for v in verdicts),
        "jobs": sum(v.jobs for v in verdicts), "lost": sum(v.lost for v in verdicts),
        "stale_publishes": sum(v.stale_publishes for v in verdicts),
        "deadline_misses": sum(v.deadline_misses for v in verdicts),
        "max_overrun_s": _worst([v.max_overrun_s for v in verdicts]),
        **{f"max_{k}": _worst([v.figures.get(k) for v in verdicts]) for k in figures},
        **{f"{k}_per_run": [v.figures.get(k) for v in verdicts] for k in figures},
        "failed_checks": sorted({c for v in verdicts for c, ok in v.checks.items() if not ok}),
        "problems": [p for v in verdicts for p in v.problems][:10],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--scenario", choices=["all", *SCENARIOS], default="all")
    parser.add_argument("--store", choices=["all", "sqlite", "postgres"], default="all",
                        help="all: every store the scenario is meaningful on")
    parser.add_argument("--soak", action="store_true", help="the bigger versions (more jobs)")
    args = parser.parse_args()
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    result: dict[str, Any] = {"started_at": utcnow().isoformat(timespec="seconds"), "cpus": os.cpu_count(),
                              "runs_per_scenario": args.runs, "soak": args.soak, "scenarios": {}}
    for name in names:
        stores = SCENARIOS[name][1] if args.store == "all" else (args.store,)
        for store in stores:
            if store not in SCENARIOS[name][1]:
                continue
            started = monotonic()
            verdicts = [run_one(name, store, args.soak) for _ in range(args.runs)]
            result["scenarios"][f"{name}/{store}"] = {**summary(verdicts),
                                                      "wall_s": round(monotonic() - started, 1)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
