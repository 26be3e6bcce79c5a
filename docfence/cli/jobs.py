"""`docfence submit|jobs|status|wait|cancel|download`: thin commands over the HTTP client.

`submit` with many files sends them as batches (POST /v1/jobs/batch, each batch one transaction; a
refused file does not hold back the others), then waits for them together within one budget and prints
one line per file (`--out DIR` downloads each verified artifact). `jobs` lists and searches your jobs.
Exit codes: see docfence.cli.errors.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from docfence.cli.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_POLL_TIMEOUT,
    EXIT_REQUEST,
    EXIT_USAGE,
    say,
)
from docfence.client import DocfenceClient, HttpError, JobCanceled, JobFailed, JobView, PollTimeout
from docfence.config import load_client_settings
from docfence.core.clock import monotonic
from docfence.core.errors import ApiError, DocfenceError

EXIT_JOB_ENDED = EXIT_FAILED
MAX_PARALLEL_WAITS = 8  # one HTTP long-poll each; the server caps each at 20 s
#: Request fields as this command's flags, so a refusal names what the user typed.
FLAGS = {"reason": "--reason",
         "deadline_s": "--deadline", "document_class": "--class", "mode": "--mode", "watermark": "--text",
         "idempotency_key": "--idempotency-key", "label": "--label", "password": "--password-file",
         "marks": "--marks", "recipient": "--recipient", "purpose": "--purpose", "reference": "--reference"}
BATCH = 100  # files per batch request (the server takes up to 200; 100 keeps each request small)


class UsageError(Exception):
    pass


def register(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="API base URL (default: $DOCFENCE_URL or http://127.0.0.1:8080)")
    common.add_argument("--json", action="store_true", help="print JSON (one object per line)")
    submit = sub.add_parser("submit", parents=[common], help="submit PDFs for watermarking")
    submit.add_argument("files", nargs="+", metavar="FILE")
    submit.add_argument("--class", dest="document_class")
    submit.add_argument("--mode", choices=["vector", "raster"])
    submit.add_argument("--text", help="watermark text")
    submit.add_argument("--deadline", type=float, dest="deadline_s", help="seconds (within the class max)")
    submit.add_argument("--marks", type=_json_list, metavar="JSON",
                        help="the job's marks as a JSON array (replaces the class's; see docs/watermarks.md)")
    submit.add_argument("--recipient", help="fills {recipient} in the marks (stored on the job, audited)")
    submit.add_argument("--purpose", help="fills {purpose} in the marks")
    submit.add_argument("--reference", help="fills {reference} in the marks")
    submit.add_argument("--idempotency-key", help="with several files, suffixed -1, -2, ...")
    submit.add_argument("--label", help="your own tag for the jobs (search: docfence jobs --label)")
    submit.add_argument("--password-file", metavar="F",
                        help="file whose first line is the PDFs' password (sealed by the server, used by "
                             "the render only; never put a password on the command line)")
    submit.add_argument("--wait", action="store_true", help="wait for all jobs to finish (together)")
    submit.add_argument("--out", metavar="DIR", help="wait, then download each artifact into DIR")
    submit.add_argument("--budget", type=float, default=45.0,
                        help="seconds to wait for the whole batch (default 45)")
    submit.set_defaults(func=_guard(run_submit))
    status = sub.add_parser("status", parents=[common], help="show a job")
    status.add_argument("job")
    status.set_defaults(func=_guard(run_status))
    register_cancel(sub, common)
    listing = sub.add_parser("jobs", parents=[common], help="list and search your jobs, newest first")
    listing.add_argument("--state", choices=["queued", "rendering", "succeeded", "failed", "canceled"])
    listing.add_argument("--class", dest="document_class")
    listing.add_argument("--mode", choices=["vector", "raster"])
    listing.add_argument("--label", help="exact label")
    listing.add_argument("--filename", help="exact original filename")
    listing.add_argument("--since", type=_when, help="created at or after (ISO 8601, e.g. 2026-12-01T00:00Z)")
    listing.add_argument("--until", type=_when, help="created before (ISO 8601)")
    listing.add_argument("--limit", type=int, default=50, help="jobs per page (1-200, default 50)")
    listing.add_argument("--cursor", help="continue after a page (the cursor a page printed last)")
    listing.set_defaults(func=_guard(run_jobs))
    wait = sub.add_parser("wait", parents=[common], help="wait (bounded) until a job is terminal")
    wait.add_argument("job")
    wait.add_argument("--budget", type=float, default=45.0, help="seconds (default 45)")
    wait.set_defaults(func=_guard(run_wait))
    download = sub.add_parser("download", parents=[common], help="download a job's verified artifact")
    download.add_argument("job")
    download.add_argument("--out", required=True,
                          help="a file, or a folder: an existing one or a path ending in / (created)")
    download.set_defaults(func=_guard(run_download))


def _json_list(raw: str) -> list[Any]:
    """--marks: a JSON array of objects (argparse reports the ValueError as a usage error)."""
    value = json.loads(raw)
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise ValueError("not a JSON array of objects")
    return value


def _client(args: argparse.Namespace) -> DocfenceClient:
    # The client's own settings: URL and key come from the flags or the caller's environment.
    settings = load_client_settings()
    if not settings.api_key:
        raise UsageError("DOCFENCE_API_KEY is not set: set it to an API key (docfence keys create)")
    return DocfenceClient(args.url or settings.url, settings.api_key)


def _message(exc: DocfenceError) -> str:
    """One line naming the flag at fault when the server named a field this command has a flag for."""
    text = exc.message if isinstance(exc, ApiError) and ":" in exc.message else f"{exc.code}: {exc.message}"
    flag = FLAGS.get(exc.field or "")
    return f"{flag}: {text}" if flag else text


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Map errors to exit codes; messages go to stderr, never a key or signed URL."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except UsageError as exc:
            say(str(exc))
            return EXIT_USAGE
        except PollTimeout as exc:
            say(f"{exc.code}: {exc.message} (job {exc.job_id})")
            return EXIT_POLL_TIMEOUT
        except (JobFailed, JobCanceled) as exc:
            if exc.job is not None:
                _show(exc.job, args.json)
            say(f"{exc.code}: {exc.message}")
            return EXIT_JOB_ENDED
        except ApiError as exc:
            say(_message(exc))
            return EXIT_REQUEST
        except OSError as exc:
            say(f"{exc.filename or ''}: {exc.strerror or exc}" if exc.filename else str(exc))
            return EXIT_USAGE

    return run


def _line(job: JobView) -> str:
    line = f"{job.id} {job.state} attempt={job.attempt}/{job.max_attempts} mode={job.mode}"
    if job.error_code:
        line += f" error={job.error_code}"
    if job.artifact:
        line += f" sha256={job.artifact.sha256} bytes={job.artifact.bytes} pages={job.artifact.pages}"
    return line


def _show(job: JobView, as_json: bool) -> None:
    print(json.dumps(job.raw, sort_keys=True) if as_json else _line(job), flush=True)


# -- submit: many files, submitted together and waited for together -----------------------------------
@dataclass
class _Item:
    """One file of a batch and how far it got."""

    path: str
    job: JobView | None = None
    output: Path | None = None
    code: int = EXIT_OK
    error: DocfenceError | None = None

    def fail(self, exc: DocfenceError, code: int) -> None:
        self.error, self.code = exc, code
        ended = exc.job if isinstance(exc, JobFailed | JobCanceled) else None
        last = exc.last if isinstance(exc, PollTimeout) else None
        self.job = ended or last or self.job


def run_submit(args: argparse.Namespace) -> int:
    items = [_Item(path) for path in args.files]
    password = _read_password(args.password_file)
    waiting = args.wait or args.out
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    until = monotonic() + args.budget  # one budget for submitting and waiting
    with _client(args) as client:
        if len(items) == 1:  # waiting: the submit itself waits (POST ?wait=, capped by the server)
            _submit_one(client, items[0], args, password, wait_s=min(args.budget, 20.0) if waiting else None)
        else:
            _submit_batches(client, items, args, password)
        if waiting:
            _wait_all(client, [i for i in items if i.job is not None and i.code == EXIT_OK], args, until)
    for item in items:
        _report(item, args.json)
    return max((i.code for i in items), default=EXIT_OK)


def _read_password(path: str | None) -> str | None:
    """The first line of --password-file (as `docfence watermark` reads it); UsageError names the flag."""
    if path is None:
        return None
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--password-file: cannot read {path} ({getattr(exc, 'strerror', None) or exc})") \
            from None
    return lines[0] if lines else ""


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {"document_class": args.document_class, "mode": args.mode, "deadline_s": args.deadline_s,
            "watermark": {"text": args.text} if args.text else None, "label": args.label}


def _mark_options(args: argparse.Namespace) -> dict[str, Any]:
    """The marks and their caller fields, given only when set (a batch carries them per item)."""
    chosen = {"marks": args.marks, "recipient": args.recipient, "purpose": args.purpose,
              "reference": args.reference}
    return {k: v for k, v in chosen.items() if v is not None}


def _submit_one(client: DocfenceClient, item: _Item, args: argparse.Namespace, password: str | None,
                wait_s: float | None = None) -> None:
    try:
        item.job = client.submit(item.path, idempotency_key=args.idempotency_key, password=password,
                                 wait_s=wait_s, **_options(args), **_mark_options(args))
    except ApiError as exc:
        item.fail(exc, EXIT_REQUEST)
    except OSError as exc:
        item.error, item.code = None, EXIT_USAGE
        say(f"{item.path}: {exc.strerror or exc}")


def _submit_batches(client: DocfenceClient, items: list[_Item], args: argparse.Namespace,
                    password: str | None) -> None:
    """Readable files go in batches of BATCH, each one transaction; a refused file fails alone."""
    readable = []
    for index, item in enumerate(items, start=1):
        try:
            readable.append((index, item, (Path(item.path).name, Path(item.path).read_bytes())))
        except OSError as exc:
            item.code = EXIT_USAGE
            say(f"{item.path}: {exc.strerror or exc}")
    for start in range(0, len(readable), BATCH):
        chunk = readable[start:start + BATCH]
        per_item = [{k: v for k, v in (("idempotency_key", f"{args.idempotency_key}-{index}"
                                        if args.idempotency_key else None), ("password", password)) if v}
                    | _mark_options(args) for index, _, _ in chunk]
        try:
            batch = client.submit_batch([doc for _, _, doc in chunk], items=per_item, partial=True,
                                        **_options(args))
        except ApiError as exc:
            for _, item, _ in chunk:
                item.fail(exc, EXIT_REQUEST)
            continue
        for (_, item, _), answer in zip(chunk, batch.items, strict=True):
            item.job = answer.job
            if answer.status == "refused":
                item.fail(HttpError(f"{answer.error_code}: {answer.error_message}", field=answer.error_field,
                                    server_code=answer.error_code or ""), EXIT_REQUEST)


def _wait_all(client: DocfenceClient, items: list[_Item], args: argparse.Namespace, until: float) -> None:
    """Wait for every job at once until `until` (one budget), then download into --out."""

    def one(item: _Item) -> None:
        assert item.job is not None
        try:
            item.job = client.wait(item.job.id, budget_s=max(until - monotonic(), 0.0))
            if args.out:
                item.output = client.download(item.job.id, _target(Path(args.out), item, items))
        except PollTimeout as exc:
            item.fail(exc, EXIT_POLL_TIMEOUT)
        except (JobFailed, JobCanceled) as exc:
            item.fail(exc, EXIT_JOB_ENDED)
        except ApiError as exc:
            item.fail(exc, EXIT_REQUEST)

    if not items:
        return
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_WAITS, len(items))) as pool:
        list(pool.map(one, items))


def _target(folder: Path, item: _Item, items: list[_Item]) -> Path:
    """`<stem>.watermarked.pdf`, or with the job id when two files of the batch share a stem."""
    stem = Path(item.path).stem
    assert item.job is not None
    if sum(1 for other in items if Path(other.path).stem == stem) > 1:
        return folder / f"{stem}.{item.job.id}.watermarked.pdf"
    return folder / f"{stem}.watermarked.pdf"


def _report(item: _Item, as_json: bool) -> None:
    if as_json:
        row: dict[str, Any] = {"file": item.path, "job": item.job.raw if item.job else None,
                               "output": str(item.output) if item.output else None}
        if item.error is not None:
            row["error"] = {"code": getattr(item.error, "server_code", "") or item.error.code,
                            "message": item.error.message, "field": item.error.field}
        print(json.dumps(row, sort_keys=True), flush=True)
        return
    if item.job is not None:
        tail = f" -> {item.output}" if item.output else ""
        print(f"{item.path}\t{_line(item.job)}{tail}", flush=True)
    if item.error is not None:
        say(f"{item.path}: {_message(item.error)}")


# -- one job ----------------------------------------------------------------------------------------
def run_wait(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _show(client.wait(args.job, budget_s=args.budget), args.json)
    return EXIT_OK


def _when(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)  # a time without zone is read as UTC


def run_jobs(args: argparse.Namespace) -> int:
    """One page of jobs, one line each (or JSON objects), then the cursor of the next page if any."""
    with _client(args) as client:
        page = client.list_jobs(state=args.state, document_class=args.document_class, mode=args.mode,
                                label=args.label, filename=args.filename, created_after=args.since,
                                created_before=args.until, limit=args.limit, cursor=args.cursor)
    for job in page.jobs:
        if args.json:
            print(json.dumps(job.raw, sort_keys=True), flush=True)
        else:
            names = "\t".join(x for x in (job.label and f"label={job.label}", job.filename) if x)
            print(f"{_line(job)}\t{job.created_at}" + (f"\t{names}" if names else ""), flush=True)
    if page.next_cursor:
        if args.json:
            print(json.dumps({"next_cursor": page.next_cursor}), flush=True)
        else:
            print(f"more: docfence jobs --cursor {page.next_cursor}", flush=True)
    return EXIT_OK


def run_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _show(client.get(args.job), args.json)
    return EXIT_OK


def register_cancel(sub: Any, common: argparse.ArgumentParser) -> None:
    cancel = sub.add_parser("cancel", parents=[common], help="cancel a queued or rendering job")
    cancel.add_argument("job")
    cancel.add_argument("--reason", default=None,
                        help="why, free text up to 200 characters (recorded in the job's audit events)")
    cancel.set_defaults(func=_guard(run_cancel))


def run_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _show(client.cancel(args.job, reason=args.reason), args.json)
    return EXIT_OK


def run_download(args: argparse.Namespace) -> int:
    with _client(args) as client:
        path = client.download(args.job, args.out)
    if args.json:
        print(json.dumps({"job": args.job, "path": str(path)}, sort_keys=True))
    else:
        print(path)
    return EXIT_OK
