"""`docfence audit verify|export` and `docfence delete`: evidence for compliance reviews. An export
file is 0600 whatever the umask (it names tenants, jobs and actors)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from docfence.cli.errors import say
from docfence.cli.output import add_json_flag, emit
from docfence.config import load_settings
from docfence.core.private_files import open_private


def register(sub: Any) -> None:
    audit = sub.add_parser("audit", help="verify or export the hash-chained audit trail")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    verify = audit_sub.add_parser("verify", help="check every chain; exit 1 naming the first bad event")
    add_json_flag(verify)
    verify.set_defaults(func=audit_verify)
    export = audit_sub.add_parser("export", help="write the trail as JSON lines")
    export.add_argument("--out", default="-", help="file to write (default: standard output)")
    export.add_argument("--job", default=None, help="only this job's events")
    add_json_flag(export, always=True)
    export.set_defaults(func=audit_export)

    delete = sub.add_parser("delete", help="delete every byte of a job, keeping its metadata as a tombstone")
    delete.add_argument("job_id")
    delete.add_argument("--request-id", required=True, help="the deletion request this fulfils (recorded)")
    delete.add_argument("--actor", default="cli", help="who asked (recorded in the audit trail)")
    delete.add_argument("--reason", default=None, help="why, free text up to 200 characters (audited)")
    add_json_flag(delete)
    delete.set_defaults(func=delete_job)


def _runtime() -> Any:
    from docfence.wiring import Runtime

    return Runtime.open(load_settings())


def audit_verify(args: argparse.Namespace) -> int:
    from docfence.store.audit import verify_events

    rt = _runtime()
    result = verify_events(rt.store.iter_audit(), rt.store.audit_heads())
    data = {"ok": result.ok, "events": result.events, "chains": result.chains,
            "first_bad_seq": result.first_bad_seq, "problem": result.problem}
    if args.json:
        emit(args, "", data)
    elif result.ok:
        print(f"audit trail intact: {result.events} events in {result.chains} chains")
    if not result.ok:
        where = f"event {result.first_bad_seq}" if result.first_bad_seq is not None else "a chain's end"
        say(f"audit trail BROKEN at {where}: {result.problem}")
    return 0 if result.ok else 1


def audit_export(args: argparse.Namespace) -> int:
    rt = _runtime()
    events = rt.store.audit_events(args.job) if args.job else rt.store.iter_audit()
    # closed in the finally below (stdout is not ours to close)
    out = sys.stdout if args.out == "-" else os.fdopen(open_private(Path(args.out)), "w", encoding="utf-8")
    count = 0
    try:
        for ev in events:
            row = asdict(ev)
            row["at"] = ev.at.isoformat()
            out.write(json.dumps(row, sort_keys=True) + "\n")
            count += 1
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"exported {count} events", file=sys.stderr)
    return 0


def delete_job(args: argparse.Namespace) -> int:
    from docfence.core.errors import DocfenceError
    from docfence.maintenance.deletion import DeletionService

    note = _flag_reason(args.reason)
    rt = _runtime()
    try:
        report = DeletionService(rt.store, rt.regions).delete_job(
            args.job_id, actor=args.actor, request_id=args.request_id, note=note)
    except DocfenceError as exc:
        say(f"{exc.code}: {exc.message}")
        return 1
    emit(args, f"deleted {report.objects_deleted} object(s) of {report.job_id} (request "
         f"{report.request_id}); the job's metadata and audit trail remain",
         {"job": report.job_id, "request_id": report.request_id, "objects_deleted": report.objects_deleted,
          "reason": note})
    return 0


def _flag_reason(reason: str | None) -> str | None:
    """`--reason` checked like the API's `reason`; ConfigError (exit 2) names the flag."""
    from docfence.core.errors import ConfigError, InvalidRequest
    from docfence.service import check_reason

    try:
        return check_reason(reason)
    except InvalidRequest as exc:
        raise ConfigError(f"--reason: {exc.message.removeprefix('reason: ')}", field="--reason") from None
