"""`docfence submit|status|wait|cancel|download`: thin commands over the HTTP client.

Exit codes: 0 ok, 1 job failed or canceled, 2 usage, 3 poll timeout, 4 request refused or unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from docfence.client import DocfenceClient, JobCanceled, JobFailed, JobView, PollTimeout
from docfence.config import load_client_settings
from docfence.core.errors import ApiError

EXIT_OK, EXIT_JOB_ENDED, EXIT_USAGE, EXIT_POLL_TIMEOUT, EXIT_REQUEST = 0, 1, 2, 3, 4


class UsageError(Exception):
    pass


def register(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="API base URL (default: $DOCFENCE_URL or http://127.0.0.1:8080)")
    common.add_argument("--json", action="store_true", help="print job JSON")
    submit = sub.add_parser("submit", parents=[common], help="submit PDFs for watermarking")
    submit.add_argument("files", nargs="+", metavar="FILE")
    submit.add_argument("--class", dest="document_class")
    submit.add_argument("--mode", choices=["vector", "raster"])
    submit.add_argument("--text", help="watermark text")
    submit.add_argument("--deadline", type=float, dest="deadline_s", help="seconds (within the class max)")
    submit.add_argument("--idempotency-key", help="with several files, suffixed -1, -2, ...")
    submit.add_argument("--wait", action="store_true", help="wait for each job to finish")
    submit.add_argument("--budget", type=float, default=45.0, help="wait budget per job in seconds")
    submit.set_defaults(func=_guard(run_submit))
    for name, helptext, fn in (("status", "show a job", run_status), ("cancel", "cancel a job", run_cancel)):
        p = sub.add_parser(name, parents=[common], help=helptext)
        p.add_argument("job")
        p.set_defaults(func=_guard(fn))
    wait = sub.add_parser("wait", parents=[common], help="wait (bounded) until a job is terminal")
    wait.add_argument("job")
    wait.add_argument("--budget", type=float, default=45.0, help="seconds (default 45)")
    wait.set_defaults(func=_guard(run_wait))
    download = sub.add_parser("download", parents=[common], help="download a job's verified artifact")
    download.add_argument("job")
    download.add_argument("--out", required=True, help="file or folder")
    download.set_defaults(func=_guard(run_download))


def _client(args: argparse.Namespace) -> DocfenceClient:
    # The client's own settings: URL and key come from the flags or the caller's environment.
    settings = load_client_settings()
    if not settings.api_key:
        raise UsageError("set DOCFENCE_API_KEY to an API key (docfence keys create)")
    return DocfenceClient(args.url or settings.url, settings.api_key)


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Map errors to exit codes; messages go to stderr, never a key or signed URL."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except UsageError as exc:
            print(f"docfence: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except PollTimeout as exc:
            print(f"docfence: {exc.code}: {exc.message} (job {exc.job_id})", file=sys.stderr)
            return EXIT_POLL_TIMEOUT
        except (JobFailed, JobCanceled) as exc:
            if exc.job is not None:
                _show(exc.job, args.json)
            print(f"docfence: {exc.code}: {exc.message}", file=sys.stderr)
            return EXIT_JOB_ENDED
        except ApiError as exc:
            print(f"docfence: {exc.code}: {exc.message}", file=sys.stderr)
            return EXIT_REQUEST
        except OSError as exc:
            print(f"docfence: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run


def _show(job: JobView, as_json: bool) -> None:
    if as_json:
        print(json.dumps(job.raw, sort_keys=True))
        return
    line = f"{job.id} {job.state} attempt={job.attempt}/{job.max_attempts} mode={job.mode}"
    if job.error_code:
        line += f" error={job.error_code}"
    if job.artifact:
        line += f" sha256={job.artifact.sha256} bytes={job.artifact.bytes} pages={job.artifact.pages}"
    print(line)


def run_submit(args: argparse.Namespace) -> int:
    worst = EXIT_OK
    with _client(args) as client:
        for index, path in enumerate(args.files, start=1):
            key = args.idempotency_key
            if key and len(args.files) > 1:
                key = f"{key}-{index}"
            job = client.submit(path, idempotency_key=key, document_class=args.document_class,
                                mode=args.mode, deadline_s=args.deadline_s,
                                watermark={"text": args.text} if args.text else None)
            if not args.wait:
                _show(job, args.json)
                continue
            worst = max(worst, _wait_guarded(client, job.id, args))
    return worst


def _wait_guarded(client: DocfenceClient, job_id: str, args: argparse.Namespace) -> int:
    """One job's outcome as an exit code, so the other files of a batch still get their turn."""
    return _guard(lambda a: _wait(client, job_id, a))(args)


def _wait(client: DocfenceClient, job_id: str, args: argparse.Namespace) -> int:
    _show(client.wait(job_id, budget_s=args.budget), args.json)
    return EXIT_OK


def run_wait(args: argparse.Namespace) -> int:
    with _client(args) as client:
        return _wait(client, args.job, args)


def run_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _show(client.get(args.job), args.json)
    return EXIT_OK


def run_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        _show(client.cancel(args.job), args.json)
    return EXIT_OK


def run_download(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print(client.download(args.job, args.out))
    return EXIT_OK
