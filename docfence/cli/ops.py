"""`docfence db upgrade`, `worker`, `reconcile` and `ops ...` (pause, resume, drain, set-mode, status)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from docfence.cli.errors import say
from docfence.cli.output import add_json_flag, emit
from docfence.config import load_settings
from docfence.core.clock import monotonic
from docfence.core.errors import ConfigError
from docfence.core.policy import Mode
from docfence.logs import configure as configure_logs


def _ops_actor() -> str:
    """The audit actor of `ops` commands: `cli:<login user>`, so `ops status` says who paused."""
    import getpass

    try:
        return "cli:" + getpass.getuser()
    except (OSError, KeyError):  # no login name (e.g. a container's uid without a passwd entry)
        return "cli"


def register(sub: Any) -> None:
    register_demo(sub)
    db = sub.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade = db_sub.add_parser("upgrade", help="apply pending migrations")
    add_json_flag(upgrade)
    upgrade.set_defaults(func=db_upgrade)

    worker = sub.add_parser("worker", help="claim and render jobs until SIGTERM")
    worker.add_argument("--until-idle", action="store_true", help="exit when no job is queued")
    worker.add_argument("--max-jobs", type=int, default=None)
    worker.add_argument("--no-reconcile", action="store_true", help="do not run the reconciler in-process")
    worker.add_argument("--metrics-port", type=int, default=None, help="serve /metrics from this process")
    worker.add_argument("--metrics-addr", default="127.0.0.1", help="address for --metrics-port")
    add_json_flag(worker, always=True)
    worker.set_defaults(func=run_worker_cmd)

    rec = sub.add_parser("reconcile", help="requeue expired leases, cancel past deadlines, delete orphans")
    rec.add_argument("--once", action="store_true", help="one bounded pass, then exit")
    rec.add_argument("--metrics-port", type=int, default=None,
                     help="serve /metrics (lease expirations, reclaims) from this process")
    rec.add_argument("--metrics-addr", default="127.0.0.1", help="address for --metrics-port")
    rec.add_argument("--no-webhooks", action="store_true",
                     help="deliver no webhooks from this process (run `docfence webhooks deliver` instead)")
    add_json_flag(rec, always=True)
    rec.set_defaults(func=reconcile)

    ops = sub.add_parser("ops", help="rollback operations: pause/resume claims, drain, set a class's mode")
    ops_sub = ops.add_subparsers(dest="ops_command", required=True, metavar="ACTION")
    for name, helptext in (("pause", "stop new claims"), ("resume", "allow claims again")):
        p = ops_sub.add_parser(name, help=helptext)
        p.add_argument("--mode", choices=[m.value for m in Mode], help="only this mode (default: all)")
        p.add_argument("--reason", default=None, help="why (audited; ops status shows it)")
        add_json_flag(p)
        p.set_defaults(func=pause_resume)
    drain = ops_sub.add_parser("drain", help="wait until no valid lease remains")
    drain.add_argument("--mode", choices=[m.value for m in Mode])
    drain.add_argument("--timeout", type=float, default=300.0)
    add_json_flag(drain)
    drain.set_defaults(func=drain_cmd)
    mode = ops_sub.add_parser("set-mode", help="the mode NEW jobs of a class get (existing jobs keep theirs)")
    mode.add_argument("document_class")
    mode.add_argument("mode", choices=[m.value for m in Mode])
    add_json_flag(mode)
    mode.set_defaults(func=set_mode)
    status = ops_sub.add_parser("status", help="pauses, class modes, queue depth")
    add_json_flag(status)
    status.set_defaults(func=ops_status)


def _runtime() -> Any:
    from docfence.wiring import Runtime

    return Runtime.open(load_settings())


def db_upgrade(args: argparse.Namespace) -> int:
    from docfence.store import open_store

    store = open_store(load_settings().database_url, migrate=False)
    applied = store.migrate()
    emit(args, "applied: " + ", ".join(applied) if applied else "schema is up to date", {"applied": applied})
    return 0


def run_worker_cmd(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from docfence.cli.serve import check_startup, log_level
    from docfence.wiring import Runtime, run_worker

    settings = load_settings()
    configure_logs(log_level(args, settings).upper())
    check_startup(settings)  # data folders and password key: one line, exit 2, before anything starts
    if args.no_reconcile:
        settings = replace(settings, worker=replace(settings.worker, reconcile_in_process=False))
    rt = Runtime.open(settings, role="worker")
    if args.metrics_port is not None:
        from docfence.observability.exposition import serve_metrics

        serve_metrics(args.metrics_port, rt.store, addr=args.metrics_addr)
    counters = run_worker(rt, until_idle=args.until_idle, max_jobs=args.max_jobs)
    print(json.dumps(counters.__dict__))
    rt.close()
    return 0


def reconcile(args: argparse.Namespace) -> int:
    import threading

    from docfence.cli.serve import check_startup, log_level
    from docfence.wiring import Runtime

    settings = load_settings()
    configure_logs(log_level(args, settings).upper())
    check_startup(settings)
    rt = Runtime.open(settings, role="reconciler")
    rec = rt.reconciler()
    if args.metrics_port is not None:  # its counters live in this process: expose them
        from docfence.observability.exposition import serve_metrics

        serve_metrics(args.metrics_port, rt.store, addr=args.metrics_addr)
    if rec.rewrapper is None:  # the data keys' rewrap after a key-encryption key rotation
        from docfence.maintenance.rewrap import rewrapper_for

        rec.rewrapper = rewrapper_for(rt.store, settings.encryption, settings.data_folder())
    if args.once:
        from dataclasses import asdict

        print(json.dumps(asdict(rec.run_once())))
        return 0
    stop = threading.Event()
    if not args.no_webhooks:  # as beside a worker's in-process reconciler: webhooks are maintenance too
        threading.Thread(target=rt.webhook_dispatcher().run_forever, args=(stop,), name="webhooks",
                         daemon=True).start()
    rec.run_forever(stop)
    return 0


def pause_resume(args: argparse.Namespace) -> int:
    from docfence.cli.data import _flag_reason

    reason = _flag_reason(args.reason)
    rt = _runtime()
    scope = args.mode or "all"
    if args.ops_command == "pause":
        rt.store.pause_claims(scope, actor=_ops_actor(), reason=reason)
    else:
        rt.store.resume_claims(scope, actor=_ops_actor(), reason=reason)
    paused = rt.store.paused_scopes()
    emit(args, f"{args.ops_command}d claims for {scope}; paused now: {', '.join(paused) or 'nothing'}",
         {"action": args.ops_command, "scope": scope, "paused": paused})
    return 0


def drain_cmd(args: argparse.Namespace) -> int:
    import time

    rt = _runtime()
    start = monotonic()
    while (n := rt.store.valid_lease_count(mode=args.mode)) > 0:
        if monotonic() - start > args.timeout:
            say(f"drain timed out after --timeout={args.timeout:g} s: {n} valid lease(s) remain")
            return 1
        print(f"waiting: {n} valid lease(s)", file=sys.stderr)
        time.sleep(1.0)
    emit(args, "drained: no valid leases remain", {"drained": True, "valid_leases": 0})
    return 0


def set_mode(args: argparse.Namespace) -> int:
    rt = _runtime()
    rt.settings.document_class(args.document_class)  # ConfigError names the configured classes
    rt.store.set_class_mode(args.document_class, args.mode, actor="cli")
    emit(args, f"new jobs of class {args.document_class} now get mode {args.mode}; existing jobs keep theirs",
         {"document_class": args.document_class, "mode": args.mode})
    return 0


def ops_status(args: argparse.Namespace) -> int:
    rt = _runtime()
    pauses = rt.store.claim_pauses()
    status = {"paused": [p.scope for p in pauses], "class_modes": rt.store.class_modes(),
              "pauses": [{"scope": p.scope, "paused_at": p.paused_at.isoformat(), "actor": p.actor,
                          "reason": p.reason} for p in pauses],
              "jobs_by_state": rt.store.count_by_state(), "valid_leases": rt.store.valid_lease_count(),
              "data_keys": _data_key_status(rt)}
    rt.close()
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    if not pauses:
        print("claims paused: nothing (workers claim every mode)")
    for p in pauses:
        print(f"claims paused: {p.scope} by {p.actor} at {p.paused_at.isoformat(timespec='seconds')}"
              f" ({'reason: ' + p.reason if p.reason else 'no reason given'})")
    configured = {name: cls.mode.value for name, cls in rt.settings.all_classes().items()}
    modes = {**configured, **status["class_modes"]}
    print("mode new jobs get: " + ", ".join(
        f"{name}={mode}{' (set by ops set-mode)' if name in status['class_modes'] else ''}"
        for name, mode in sorted(modes.items())))
    counts = status["jobs_by_state"]
    print("jobs: " + ", ".join(f"{state} {counts[state]}" for state in counts))
    print(f"valid leases: {status['valid_leases']} (jobs a live worker is rendering now)")
    _print_data_keys(status["data_keys"])
    return 0


def _data_key_status(rt: Any) -> dict[str, Any]:
    """Live wrapped data keys per key-encryption key (by fingerprint: a key id may be an ARN naming an
    account) and how many are not under the current one yet (None: the current one is unknown)."""
    from docfence.core.records import key_fingerprint
    from docfence.maintenance.rewrap import current_kek, pending

    counts = rt.store.count_data_keys()
    current = current_kek(rt.settings.encryption, rt.settings.data_folder())
    return {"current_kek": key_fingerprint(*current) if current else None,
            "to_rewrap": pending(counts, current) if current else None,
            "by_kek": [{"provider": provider, "kek_fingerprint": key_fingerprint(provider, kek_id),
                        "data_keys": n, "current": (provider, kek_id) == current}
                       for (provider, kek_id), n in sorted(counts.items())]}


def _print_data_keys(keys: dict[str, Any]) -> None:
    under = ", ".join(f"{k['data_keys']} under {k['provider']}:{k['kek_fingerprint']}"
                      f"{' (current)' if k['current'] else ''}" for k in keys["by_kek"])
    print(f"data keys: {under or 'none wrapped yet'}")
    if keys["to_rewrap"] is None:
        print("data keys to re-wrap: unknown (the current key-encryption key cannot be read now: no key "
              "file yet, or the key service does not answer)")
    else:
        print(f"data keys to re-wrap: {keys['to_rewrap']} (the reconciler moves them under the current "
              f"key{' ' + keys['current_kek'] if keys['current_kek'] else ''}, rewrap_batch a pass)")


def register_demo(sub: Any) -> None:
    demo = sub.add_parser("demo", help="run sample jobs end to end on SQLite + a local folder")
    demo.add_argument("--dir", default="docfence-demo", help="where the database and files go")
    demo.set_defaults(func=demo_cmd)


def demo_cmd(args: argparse.Namespace) -> int:
    from pathlib import Path

    from docfence.demo import run_demo

    folder = Path(args.dir)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--dir={args.dir!r}: not a folder (the demo keeps its database and files there)")
    return run_demo(folder, sys.stdout)
