"""`docfence templates create|list`, `docfence reports request|show|retry|schedule add|schedule run|
dispatch`: thin commands over docfence.reports, against the store and storage named by the settings."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import threading
import tomllib
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from docfence.cli.errors import EXIT_USAGE, describe, say
from docfence.cli.output import add_json_flag, emit
from docfence.config import load_settings
from docfence.config.environment import environment
from docfence.core.clock import SystemClock
from docfence.core.errors import ConfigError, DocfenceError
from docfence.providers import ProviderConfig, from_dict

log = logging.getLogger("docfence.cli")
#: Report request fields as this command's flags, so a refusal names what the user typed.
FLAGS = {"data": "--data", "period": "--period", "subject": "--subject", "template": "--template",
         "tenant": "--tenant", "document_class": "--class", "variant": "--variant",
         "processor": "--processor", "watermark": "--watermark", "deadline_s": "--deadline",
         "reason": "--reason"}


def register(sub: Any) -> None:
    templates = sub.add_parser("templates", help="immutable, versioned report templates")
    t_sub = templates.add_subparsers(dest="templates_command", metavar="ACTION", required=True)
    create = t_sub.add_parser("create", help="store a folder as the next version of a template")
    create.add_argument("--id", required=True, dest="template_id")
    create.add_argument("--dir", required=True, help="template.html, style.css, schema.json + assets")
    create.add_argument("--tenant", help="the tenant owning the template (default: shared with all tenants)")
    add_json_flag(create)
    create.set_defaults(func=_guard(run_template_create))
    listing = t_sub.add_parser("list", help="list template versions")
    listing.add_argument("--id", dest="template_id")
    add_json_flag(listing)
    listing.set_defaults(func=_guard(run_template_list))

    reports = sub.add_parser("reports", help="report requests, retries, schedules, provider dispatch")
    r_sub = reports.add_subparsers(dest="reports_command", metavar="ACTION", required=True)
    request = r_sub.add_parser("request", help="create a report request (idempotent) and its job")
    request.add_argument("--tenant", required=True)
    request.add_argument("--subject", required=True)
    request.add_argument("--period", required=True, help="e.g. 2026-11")
    request.add_argument("--template", required=True, help="id@version")
    request.add_argument("--data", help="JSON file with the report data (default: {})")
    request.add_argument("--watermark", help='JSON object of watermark fields, e.g. {"text": "DRAFT"} '
                                             "(default: the class's watermark)")
    request.add_argument("--supersede", action="store_true",
                         help="replace this period's request (its job ended) by one with corrected data; "
                              "the old one stays as evidence")
    add_json_flag(request)
    _request_options(request)
    request.set_defaults(func=_guard(run_request))
    for name, helptext, fn in (("show", "a request with its jobs", run_show),
                               ("retry", "a new job linked to the failed one", run_retry)):
        p = r_sub.add_parser(name, help=helptext)
        p.add_argument("request_id")
        if fn is run_retry:
            p.add_argument("--reason", help="why (at most 200 characters), kept in the new job's audit trail")
        add_json_flag(p)
        p.set_defaults(func=_guard(fn))
    _register_schedule(r_sub)
    dispatch = r_sub.add_parser("dispatch", help="drive provider-rendered report jobs to terminal states")
    dispatch.add_argument("--providers", required=True, help="TOML file with [providers.<name>] tables")
    dispatch.add_argument("--once", action="store_true", help="one pass, then exit")
    dispatch.add_argument("--interval", type=float, default=2.0, help="seconds between passes")
    add_json_flag(dispatch, always=True)
    dispatch.set_defaults(func=_guard(run_dispatch))


def _request_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variant", choices=["pdf/a-3b", "pdf/ua-1"])
    parser.add_argument("--class", dest="document_class")
    parser.add_argument("--processor", default="local", help="local, or a provider named in --providers")
    parser.add_argument("--providers", help="TOML file with [providers.<name>] tables")


def _register_schedule(r_sub: Any) -> None:
    schedule = r_sub.add_parser("schedule", help="monthly schedules")
    s_sub = schedule.add_subparsers(dest="schedule_command", metavar="ACTION", required=True)
    add = s_sub.add_parser("add", help="template X@v monthly on day D (requests period M-1 in month M)")
    add.add_argument("--tenant", required=True)
    add.add_argument("--subject", required=True)
    add.add_argument("--template", required=True, help="id@version")
    add.add_argument("--day", type=int, default=1, dest="day_of_month")
    add.add_argument("--catch-up", type=int, default=3, dest="catch_up_periods")
    add.add_argument("--start-period", help="YYYY-MM of the first request (default: the next one due)")
    _request_options(add)
    add_json_flag(add)
    add.set_defaults(func=_guard(run_schedule_add))
    run = s_sub.add_parser("run", help="one scheduler pass (or a pass every --every seconds until SIGTERM)")
    run.add_argument("--every", type=float, default=None, help="keep running: seconds between passes")
    run.add_argument("--data-dir", required=True, help="<dir>/<tenant>/<subject>/<period>.json")
    run.add_argument("--providers", help="TOML file with [providers.<name>] tables")
    run.add_argument("--now", help="ISO time of the pass (default: now)")
    add_json_flag(run, always=True)
    run.set_defaults(func=_guard(run_schedule_run))


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """One line naming the flag at fault (`--data`, `--period`, ...) when the error names a field."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except DocfenceError as exc:
            flag = FLAGS.get((exc.field or "").split(".")[0].split("[")[0])
            say(f"{flag}: {describe(exc)}" if flag else describe(exc))
            return EXIT_USAGE

    return wrapped


def load_provider_configs(path: str | None) -> dict[str, ProviderConfig]:
    """`[providers.<name>]` tables; credentials come from the variable each table names in auth_env."""
    if not path:
        return {}
    try:
        data = tomllib.loads(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"--providers={path!r}: cannot read the file ({exc.strerror})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--providers={path!r}: not valid TOML ({exc})") from exc
    tables = data.get("providers", {})
    if not isinstance(tables, dict) or not tables:
        raise ConfigError(f"--providers={path!r}: the file needs [providers.<name>] tables")
    return {name: from_dict({"name": name, **table}, environ=environment()) for name, table in tables.items()}


def read_json_file(flag: str, path: str) -> Any:
    """The JSON in `path`; ConfigError naming `flag` when it cannot be read or parsed."""
    try:
        return json.loads(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{flag}={path!r}: cannot read the file ({exc.strerror})") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{flag}={path!r}: not valid JSON ({exc})") from exc


def _runtime() -> Any:
    from docfence.wiring import Runtime

    return Runtime.open(load_settings())


def _requests(rt: Any, providers: str | None) -> Any:
    from docfence.reports import ReportRequests

    return ReportRequests(rt.settings, rt.store, rt.regions, processors=load_provider_configs(providers))


def run_template_create(args: argparse.Namespace) -> int:
    from docfence.reports import Templates

    rt = _runtime()
    try:
        info, created = Templates(rt.store).create_from_dir(args.template_id, args.dir, actor="cli",
                                                            owner=args.tenant or None)
    finally:
        rt.close()
    emit(args, f"{info.ref}\t{info.sha256}\t{'created' if created else 'unchanged (identical to newest)'}",
         {"ref": info.ref, "sha256": info.sha256, "created": created, "shared": info.owner is None})
    return 0


def run_template_list(args: argparse.Namespace) -> int:
    from docfence.reports import Templates

    rt = _runtime()
    try:
        for info in Templates(rt.store).list(args.template_id):
            text = f"{info.ref}\t{info.name}\t{info.sha256}\t{info.created_at.isoformat()}\t{info.created_by}"
            emit(args, text, {"ref": info.ref, "name": info.name, "sha256": info.sha256,
                  "created_at": info.created_at.isoformat(), "created_by": info.created_by})
    finally:
        rt.close()
    return 0


def run_request(args: argparse.Namespace) -> int:
    from docfence.reports import RequestSpec

    data = read_json_file("--data", args.data) if args.data else {}
    watermark = None
    if args.watermark:
        try:
            watermark = json.loads(args.watermark)
        except ValueError as exc:
            raise ConfigError(f"--watermark={args.watermark!r}: not a JSON object ({exc})") from None
        if not isinstance(watermark, dict):
            raise ConfigError(f"--watermark={args.watermark!r}: must be a JSON object of watermark fields")
    spec = RequestSpec(tenant=args.tenant, subject=args.subject, period=args.period, template=args.template,
                       data=data, variant=args.variant, document_class=args.document_class,
                       processor=args.processor, watermark=watermark, supersede=args.supersede)
    rt = _runtime()
    try:
        detail, created = _requests(rt, args.providers).create(spec, actor="cli")
    finally:
        rt.close()
    if args.json:
        print(json.dumps({**_request_json(detail), "created": created}, sort_keys=True))
        return 0
    r = detail.request
    how = ("created" if r.revision == 1 else f"created revision {r.revision}, superseding {r.supersedes}") \
        if created else "existing"
    print(f"{r.id}\t{how}\tjob {detail.jobs[-1].id}\t{detail.state}")
    return 0


def _request_json(detail: Any) -> dict[str, Any]:
    r = detail.request
    return {"id": r.id, "tenant": r.tenant, "subject": r.subject, "period": r.period,
            "template": f"{r.template_id}@{r.template_version}", "processor": r.processor, "region": r.region,
            "revision": r.revision, "supersedes": r.supersedes, "superseded_by": r.superseded_by,
            "watermark": r.watermark, "data_sha256": r.data_sha256, "state": detail.state,
            "jobs": [{"id": j.id, "state": j.state.value, "attempt": j.attempt, "parent": j.parent_job_id,
                      "error_code": j.last_error_code} for j in detail.jobs]}


def run_show(args: argparse.Namespace) -> int:
    rt = _runtime()
    try:
        detail = _requests(rt, None).get(args.request_id)
    finally:
        rt.close()
    if args.json:
        print(json.dumps(_request_json(detail), sort_keys=True))
        return 0
    r = detail.request
    print(f"{r.id}\t{r.tenant}\t{r.subject}\t{r.period}\t{r.template_id}@{r.template_version}\t"
          f"{r.processor}\t{r.region}\t{detail.state}")
    if r.supersedes or r.superseded_by:
        print(f"  revision {r.revision}\tsupersedes {r.supersedes or '-'}\tsuperseded by "
              f"{r.superseded_by or '- (current)'}")
    for job in detail.jobs:
        print(f"  job {job.id}\t{job.state.value}\tattempt {job.attempt}\tparent {job.parent_job_id or '-'}\t"
              f"{job.last_error_code or ''}")
    if detail.observation is not None:
        o = detail.observation
        print(f"  provider {o.provider}: last status {o.status or '-'} ({o.kind}) at "
              f"{o.observed_at.isoformat()}, {o.passes} passes, outcome {o.outcome or '-'}")
    return 0


def run_retry(args: argparse.Namespace) -> int:
    """A new job for a failed or canceled report; a refusal (still active, or `retry_would_fail`: the
    failure would repeat, with what to do instead) is one line on stderr and exit code 2."""
    rt = _runtime()
    try:
        job = _requests(rt, None).retry(args.request_id, actor="cli", reason=args.reason)
    finally:
        rt.close()
    if args.json:
        print(json.dumps({"id": job.id, "parent": job.parent_job_id, "state": job.state.value}))
        return 0
    print(f"job {job.id}\tparent {job.parent_job_id}\t{job.state.value}")
    return 0


def run_schedule_add(args: argparse.Namespace) -> int:
    from docfence.reports.scheduler import add_schedule

    rt = _runtime()
    try:
        schedule, created = add_schedule(
            _requests(rt, args.providers), tenant=args.tenant, subject=args.subject, template=args.template,
            day_of_month=args.day_of_month, catch_up_periods=args.catch_up_periods, variant=args.variant,
            document_class=args.document_class, processor=args.processor, start_period=args.start_period,
            actor="cli",
        )
    finally:
        rt.close()
    emit(args, f"{schedule.id}\t{'created' if created else 'existing'}\tlast period {schedule.last_period}",
         {"id": schedule.id, "created": created, "last_period": schedule.last_period})
    return 0


def run_schedule_run(args: argparse.Namespace) -> int:
    from docfence.reports.scheduler import DirectoryDataSource, Scheduler, SchedulerConfig

    rt = _runtime()
    stop = _stop_on_signals()
    errors = 0
    try:
        config = SchedulerConfig(data_source=DirectoryDataSource(Path(args.data_dir)), actor="cli-scheduler")
        scheduler = Scheduler(config, _requests(rt, args.providers))

        def now() -> datetime:
            return datetime.fromisoformat(args.now) if args.now else SystemClock().now()

        def report(result: Any) -> None:
            nonlocal errors
            errors += len(result.errors)
            print(json.dumps(result.__dict__, sort_keys=True), flush=True)

        if args.every is None:
            report(scheduler.run_once(now()))
        else:  # under the loop supervisor: a pass that raises is logged and counted, the next follows
            scheduler.run_forever(stop, interval_s=args.every, now=now, on_pass=report)
    finally:
        rt.close()
    return 1 if errors else 0


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT, so service loops finish their pass and exit cleanly."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def run_dispatch(args: argparse.Namespace) -> int:
    from docfence.blobs.kek.jobs import JobKeys
    from docfence.reports.dispatcher import Dispatcher, DispatcherConfig

    providers = load_provider_configs(args.providers)
    rt = _runtime()
    stop = _stop_on_signals()
    stack = contextlib.ExitStack()
    try:
        config = DispatcherConfig(providers=providers, worker_id=f"dispatcher-{os.getpid()}")
        keys = JobKeys(rt.settings.encryption, rt.settings.data_folder())  # report jobs' data keys
        dispatcher = Dispatcher(config, rt.store, rt.regions, job_keys=keys)
        stack.callback(dispatcher.close)

        def report(result: Any) -> None:
            print(json.dumps(result.__dict__, sort_keys=True), flush=True)

        if args.once:
            report(dispatcher.run_once())
        else:  # under the loop supervisor: a pass that raises is logged and counted, the next follows
            dispatcher.run_forever(stop, interval_s=args.interval, on_pass=report)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        stack.close()
        rt.close()
