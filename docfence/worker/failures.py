"""What an exception nobody expected between claim and commit becomes: a coded failure of that attempt
with an error id naming its logged traceback, never the end of the worker. What of a failed validation
report its attempt keeps (bounded). Also the worker's start line.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from docfence.blobs.regions import RegionRouter
from docfence.config import Settings
from docfence.core.errors import ConfigError, DocfenceError, RegionNotApproved
from docfence.core.ids import new_id
from docfence.core.loops import safe_traceback
from docfence.observability import metrics

log = logging.getLogger("docfence.worker")

#: Known errors that reach the worker's guard, and whether the attempt's failure is retryable. A region
#: removed from the configuration does not come back by retrying; another worker's configuration may be
#: right (a job that keeps meeting a bad one ends failed after its attempts).
RETRYABLE_WHEN_UNEXPECTED: dict[type[DocfenceError], bool] = {RegionNotApproved: False, ConfigError: True}


@dataclass(frozen=True)
class AttemptFailure:
    """How the attempt fails: `message` is public (the job's), never the exception's text for a bug."""

    code: str
    message: str
    retryable: bool
    error_id: str


def unexpected_failure(exc: Exception, ctx: dict[str, Any]) -> AttemptFailure:
    """Log `exc` at ERROR with its traceback (core.loops.safe_traceback: frames and types, never a
    message that may quote a document) under a fresh error id, and say how its attempt fails: a
    docfence error with its own code and message, anything else as internal_error, retryable while
    attempts remain."""
    error_id = new_id("err")
    extra = {**ctx, "error_id": error_id}
    if isinstance(exc, DocfenceError):
        log.error("unexpected %s while processing (error id %s)\n%s", exc.code, error_id,
                  safe_traceback(exc), extra=extra)
        retryable = next((r for t, r in RETRYABLE_WHEN_UNEXPECTED.items() if isinstance(exc, t)),
                         exc.retryable)
        return AttemptFailure(exc.code, f"{exc.message} (error id {error_id})", retryable, error_id)
    log.error("internal error (error id %s): unexpected %s\n%s", error_id, type(exc).__name__,
              safe_traceback(exc), extra=extra)
    metrics.record_internal_error()
    return AttemptFailure("internal_error", f"internal error (error id {error_id})", True, error_id)


#: The most JSON text of a failed validation report an attempt row keeps.
MAX_KEPT_VALIDATION = 16 * 1024

_REPORT_KEYS = ("ok", "mode", "level", "pages")
_CHECK_KEYS = ("name", "ok", "failures", "details", "skipped")


def kept_validation(report: Mapping[str, Any] | None) -> str | None:
    """The report of an attempt that failed validation as JSON text of at most MAX_KEPT_VALIDATION
    bytes: its outcome and each check's name, outcome, failures and details (already capped per check,
    never document text). Too long, it keeps only the failed checks, then only their first detail,
    then only their names, and says so ("trimmed")."""
    if not report:
        return None
    checks = [{k: c[k] for k in _CHECK_KEYS if k in c}
              for c in report.get("checks", []) if isinstance(c, Mapping)]
    head = {k: report[k] for k in _REPORT_KEYS if k in report}
    failed = [c for c in checks if not c.get("ok")]
    shapes: list[tuple[list[dict[str, Any]], str | None]] = [
        (checks, None),
        (failed, "passing checks left out"),
        ([{**c, "failures": c.get("failures", [])[:1], "details": c.get("details", [])[:1]}
          for c in failed], "one detail per failed check"),
        ([{"name": c.get("name"), "ok": False} for c in failed], "failed check names only"),
    ]
    for kept, trimmed in shapes:
        text = json.dumps({**head, "checks": kept, **({"trimmed": trimmed} if trimmed else {})},
                          sort_keys=True, ensure_ascii=False)
        if len(text.encode()) <= MAX_KEPT_VALIDATION:
            return text
    return json.dumps({**head, "checks": [], "trimmed": "too many failed checks"}, sort_keys=True)


def describe_start(settings: Settings, store: object, regions: RegionRouter, worker_id: str) -> str:
    """The worker's start line: store dialect, storage regions and backends, classes, pid. No URLs or
    secrets (a URL may carry a password)."""
    storage = ", ".join(f"{name}={type(regions.for_region(name)).__name__}" for name in regions.approved())
    dialect = getattr(store, "dialect", None) or type(store).__name__
    classes = ", ".join(sorted(settings.all_classes()))
    return (f"worker {worker_id} starting: pid {os.getpid()}, store {dialect}, storage {storage}, "
            f"classes {classes}")
