"""`docfence inspect JOB`: why is this job still in progress? State, lease, deadline and what happens next."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from docfence.config import load_settings
from docfence.core.errors import NotFound


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="one screen on a job: lease, deadline, timeline, what happens next")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true", help="machine-readable (the console's view)")
    p.add_argument("--show-recipient", action="store_true",
                   help="show the marks' recipient, purpose and reference (hidden by default)")
    p.set_defaults(func=inspect_cmd)


def inspect_cmd(args: argparse.Namespace) -> int:
    from docfence.observability.inspect import format_inspection, inspect_job, inspection_dict
    from docfence.store import open_store

    store = open_store(load_settings().database_url, application_name="docfence-inspect")
    try:
        ins = inspect_job(store, args.job_id)
    except NotFound:
        print(f"no job {args.job_id}", file=sys.stderr)
        return 1
    finally:
        store.close()
    shown = bool(args.show_recipient)
    print(json.dumps(inspection_dict(ins, shown), indent=2) if args.json else format_inspection(ins, shown))
    return 0
