"""`docfence webhooks create|list|disable|rotate-secret|deliver|status|show`: signed webhook endpoints
per tenant, straight against the store named by the settings, and the delivery dispatcher.

`create` and `rotate-secret` print the endpoint's signing secret once, on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from docfence.cli.errors import EXIT_USAGE, describe, say
from docfence.cli.output import add_json_flag, emit
from docfence.config import load_settings
from docfence.core.errors import InvalidRequest, NotFound
from docfence.core.records import WebhookEndpoint


def _usage_errors(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A refused argument (bad URL, unknown event, another tenant's endpoint) is a usage error: one
    line and exit code 2, as `docfence keys` does."""
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except (InvalidRequest, NotFound) as exc:
            say(describe(exc))
            return EXIT_USAGE
    return run


def register(sub: Any) -> None:
    hooks = sub.add_parser("webhooks", help="signed webhooks: endpoints per tenant, delivery, history")
    hooks_sub = hooks.add_subparsers(dest="webhooks_command", metavar="ACTION", required=True)
    create = hooks_sub.add_parser("create", help="add an endpoint (its signing secret is printed once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--url", required=True, help="the receiver, http:// or https://")
    create.add_argument("--events", default="*",
                        help="comma-separated: job.succeeded,job.failed,job.canceled,"
                             "report_request.succeeded,report_request.failed,report_request.canceled; "
                             "* for all (default)")
    create.add_argument("--description")
    add_json_flag(create)
    create.set_defaults(func=_usage_errors(run_create))
    listing = hooks_sub.add_parser("list", help="list endpoints (never their secrets)")
    listing.add_argument("--tenant")
    add_json_flag(listing)
    listing.set_defaults(func=run_list)
    for name, func, text in (("disable", run_disable, "stop delivering to an endpoint (pending ones fail)"),
                             ("rotate-secret", run_rotate, "issue a new signing secret (printed once)")):
        action = hooks_sub.add_parser(name, help=text)
        action.add_argument("endpoint_id")
        action.add_argument("--tenant", required=True)
        add_json_flag(action)
        action.set_defaults(func=_usage_errors(func))
    deliver = hooks_sub.add_parser("deliver", help="run the delivery dispatcher")
    deliver.add_argument("--once", action="store_true", help="one pass, then print what it did")
    add_json_flag(deliver)
    deliver.set_defaults(func=run_deliver)
    prune = hooks_sub.add_parser("prune", help="delete outbox events whose deliveries all finished over "
                                               "[webhooks].keep_events_s ago (the dispatcher also does it)")
    add_json_flag(prune)
    prune.set_defaults(func=run_prune)
    status = hooks_sub.add_parser("status", help="deliveries by state: pending, delivering, delivered, "
                                                 "failed")
    add_json_flag(status)
    status.set_defaults(func=run_status)
    show = hooks_sub.add_parser("show", help="a job's webhook events, deliveries and attempts")
    show.add_argument("job_id")
    add_json_flag(show)
    show.set_defaults(func=run_show)


def _endpoints() -> Any:
    from docfence.maintenance.webhook_endpoints import WebhookEndpoints
    from docfence.store import open_store

    settings = load_settings()
    return WebhookEndpoints(open_store(settings.database_url), settings.webhooks)


def _out(endpoint: WebhookEndpoint) -> dict[str, Any]:
    return {"id": endpoint.id, "tenant": endpoint.tenant, "url": endpoint.url,
            "events": list(endpoint.events), "description": endpoint.description,
            "created_at": endpoint.created_at.isoformat(),
            "disabled_at": endpoint.disabled_at.isoformat() if endpoint.disabled_at else None}


def _print_secret(args: argparse.Namespace, endpoint: WebhookEndpoint, secret: str) -> None:
    if args.json:  # the secret is printed once, here too
        emit(args, "", {**_out(endpoint), "secret": secret})
        return
    print(f"endpoint: {endpoint.id}  tenant: {endpoint.tenant}  events: {','.join(endpoint.events)}")
    print("store this signing secret now; it is not shown again:")
    print(secret)


def run_create(args: argparse.Namespace) -> int:
    from docfence.service import check_tenant

    issued = _endpoints().create(check_tenant(args.tenant), args.url, args.events.split(","), actor="cli",
                                 description=args.description)
    _print_secret(args, issued.endpoint, issued.secret)
    return 0


def run_list(args: argparse.Namespace) -> int:
    for endpoint in _endpoints().list(args.tenant):
        state = f"disabled {endpoint.disabled_at.isoformat()}" if endpoint.disabled_at else "enabled"
        emit(args, f"{endpoint.id}\t{endpoint.tenant}\t{state}\t{','.join(endpoint.events)}\t{endpoint.url}",
             _out(endpoint))
    return 0


def run_disable(args: argparse.Namespace) -> int:
    endpoint = _endpoints().disable(args.tenant, args.endpoint_id, actor="cli")
    emit(args, f"disabled {endpoint.id}", _out(endpoint))
    return 0


def run_rotate(args: argparse.Namespace) -> int:
    issued = _endpoints().rotate(args.tenant, args.endpoint_id, actor="cli")
    _print_secret(args, issued.endpoint, issued.secret)
    return 0


def run_deliver(args: argparse.Namespace) -> int:
    from docfence.logs import configure
    from docfence.maintenance.webhooks import WebhookDispatcher
    from docfence.store import open_store

    settings = load_settings()
    configure(settings.log_level.upper())
    dispatcher = WebhookDispatcher(open_store(settings.database_url), settings.webhooks,
                                   worker=f"webhooks@{socket.gethostname()}:{os.getpid()}")
    if args.once:
        result = dispatcher.run_once()
        counts = {name: len(keys) for name, keys in result.__dict__.items()}
        emit(args, " ".join(f"{k}={v}" for k, v in counts.items()), counts)
        return 0
    dispatcher.run_forever(threading.Event())
    return 0


def run_prune(args: argparse.Namespace) -> int:
    from docfence.maintenance.webhook_pruning import PruneConfig, WebhookPruner
    from docfence.store import open_store

    settings = load_settings()
    store = open_store(settings.database_url)
    pruned = WebhookPruner(store, PruneConfig(settings.webhooks.keep_events_s)).run_until_done()
    emit(args, f"pruned={pruned}", {"pruned": pruned})
    return 0


def run_status(args: argparse.Namespace) -> int:
    from docfence.store import open_store

    counts = open_store(load_settings().database_url).count_webhook_deliveries()
    emit(args, " ".join(f"{state}={n}" for state, n in counts.items()), counts)
    return 0


def run_show(args: argparse.Namespace) -> int:
    from docfence.store import open_store

    activity = open_store(load_settings().database_url).webhook_activity(args.job_id)
    events = activity.events.items()
    data = {"events": [{"id": k, "type": t, "payload": json.loads(p)} for k, (t, p) in events],
            "deliveries": [d.__dict__ for d in activity.deliveries],
            "attempts": [a.__dict__ for a in activity.attempts]}
    if args.json:
        emit(args, "", data)
        return 0
    for d in activity.deliveries:
        print(f"{d.event_id}\t{d.type}\t{d.state}\tattempts={d.attempt}\t{d.failure_reason or ''}\t{d.url}")
    for a in activity.attempts:
        print(f"  {a.event_id} #{a.attempt}\t{a.outcome or 'in flight'}\t{a.status_code or '-'}\t"
              f"{a.latency_ms if a.latency_ms is not None else '-'} ms\t{a.error or ''}")
    return 0
