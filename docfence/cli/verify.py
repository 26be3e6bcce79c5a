"""`docfence verify`: what a recipient can check about an issued document, over the public API (no key).

Give the URL from the document's QR code, or a job id with `--code`; add `--file` or `--sha256` to ask
whether a copy is the issued file. Exit 0: verified (and, with a file or hash, it matches); 1: it does not
match; 4: not a verifiable document, or the request failed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from docfence.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_REQUEST, EXIT_USAGE, say
from docfence.client import DocfenceClient
from docfence.config import load_client_settings
from docfence.core.errors import DocfenceError


def register(sub: Any) -> None:
    p = sub.add_parser("verify", help="check an issued document by its QR URL, or job id and code")
    p.add_argument("target", metavar="URL_OR_JOB", help="the URL in the document's QR code, or a job id")
    p.add_argument("--code", help="the verification code (the c= of the QR URL) when giving a job id")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--file", help="a copy of the document: does it match the issued file?")
    what.add_argument("--sha256", help="the sha256 of a copy: does it match the issued file?")
    p.add_argument("--url", help="API base URL (default: $DOCFENCE_URL or http://127.0.0.1:8080)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.set_defaults(func=run_verify)


def parse_target(target: str, code: str | None) -> tuple[str, str]:
    """(job id, code) from a QR URL (…/v1/verify/{job_id}?c={code}) or a job id and --code."""
    if "://" in target:
        parts = urlsplit(target)
        job_id = parts.path.rstrip("/").rsplit("/", 1)[-1]
        code = code or (parse_qs(parts.query).get("c") or [""])[0]
        return job_id, code
    return target, code or ""


def run_verify(args: argparse.Namespace) -> int:
    job_id, code = parse_target(args.target, args.code)
    if not code:
        say("--code: the verification code is required with a job id (or give the QR's URL)")
        return EXIT_USAGE
    with DocfenceClient(args.url or load_client_settings().url, "") as client:
        try:
            answer = client.verify(job_id, code, document=args.file, sha256=args.sha256)
        except DocfenceError as exc:
            say(exc.message if ":" in exc.message else f"{exc.code}: {exc.message}")
            return EXIT_REQUEST
    if args.json:
        print(json.dumps(answer, sort_keys=True))
    elif "match" in answer:
        print(f"{'MATCH' if answer['match'] else 'NO MATCH'}  sha256 {answer['sha256']}")
    else:
        print(f"issued by {answer['organisation'] or '(unnamed)'} at {answer['issued_at']}  "
              f"sha256 {answer['sha256']}{'  (deleted since)' if answer['deleted'] else ''}")
    return EXIT_OK if answer.get("match", True) else EXIT_FAILED
