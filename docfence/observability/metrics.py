"""Process metrics (counters and histograms) and the `record_*` calls that feed them.

Imports only core and prometheus_client so worker, maintenance and providers can call it. With
PROMETHEUS_MULTIPROC_DIR set (read by prometheus_client at import) every process writes to that folder and
one scrape aggregates them; otherwise each process serves its own. Label values are bounded enums only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Histogram, values

from docfence.core.process_id import process_identifier
from docfence.core.records import Job
from docfence.core.states import JobState

#: Page-count buckets of the render-duration histogram (label `pages`); bounded on purpose.
PAGE_BUCKETS: tuple[tuple[int, str], ...] = ((1, "1"), (10, "2-10"), (50, "11-50"), (200, "51-200"))
PAGE_BUCKET_OVERFLOW = "201+"
RENDER_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TERMINAL_SECONDS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0)
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 10, 20, 100)
_MODES = frozenset({"vector", "raster"})
#: Why a worker discarded an attempt's output (record_discarded).
DISCARD_REASONS = ("lease_lost", "stale_commit", "stale_fail", "commit_unknown")
#: How a provider poll ended: the values of providers.poller.PollOutcomeCode (a test keeps them equal).
POLL_OUTCOMES = ("succeeded", "provider_failed", "deadline", "provider_http_error", "provider_unavailable",
                 "provider_malformed", "provider_unknown_status")
#: Where sealing or opening a job's bytes failed (label `op` of docfence_encryption_failures_total).
ENCRYPTION_OPS = ("seal", "open", "wrap", "unwrap")
#: The error codes those failures carry, started at zero (an unknown code is still counted, bounded).
ENCRYPTION_CODES = ("object_integrity", "storage_error", "config_invalid")
_MAX_LABEL = 48

if getattr(values.ValueClass, "_multiprocess", False):
    # before the first metric: files named by pid and pid namespace, not bare pid (process_id.py)
    values.ValueClass = values.MultiProcessValue(process_identifier=process_identifier)

RENDER_DURATION = Histogram(
    "docfence_render_duration_seconds", "Render + validation time of one attempt in its child process.",
    ["mode", "pages", "outcome"], buckets=RENDER_SECONDS,
)
TERMINAL = Counter(
    "docfence_jobs_terminal_total", "Jobs that reached a terminal state, by state and error code.",
    ["state", "code", "mode"],
)
ATTEMPTS = Histogram(
    "docfence_job_attempts", "Attempts a job used, observed when it reaches a terminal state.",
    ["state"], buckets=ATTEMPT_BUCKETS,
)
TIME_TO_TERMINAL = Histogram(
    "docfence_job_time_to_terminal_seconds", "Submission to terminal state (the SLO of promise 1).",
    ["state", "mode"], buckets=TERMINAL_SECONDS,
)
LEASE_EXPIRED = Counter(
    "docfence_lease_expirations_total", "Leases the reconciler found expired (requeued or failed).")
RECLAIMED = Counter(
    "docfence_reclaims_total", "Jobs the reconciler took back from an expired lease, by what became of them.",
    ["outcome"],
)
DISCARDED = Counter(
    "docfence_stale_attempts_discarded_total", "Attempts whose output a worker discarded as stale.",
    ["reason"],
)
CLAIMS = Counter("docfence_claims_total", "Leases acquired by workers.", ["mode"])
VALIDATION_FAILURES = Counter(
    "docfence_validation_failures_total", "Fidelity-validation failures, one per failed check.",
    ["check", "mode"],
)
PROVIDER_POLLS = Counter(
    "docfence_provider_polls_total", "How provider polls ended (PollOutcomeCode).", ["outcome"])
PROVIDER_OBSERVATIONS = Counter(
    "docfence_provider_observations_total", "Provider status passes by classification.", ["kind"])

SKIPPED_LOCKED = Counter(
    "docfence_reconcile_skipped_locked_total",
    "Due rows (lease expired, deadline passed) a reconciler pass skipped because a session held their lock.",
    ["pass"],
)
SKIPPED_LOCKED_ESCALATED = Counter(
    "docfence_reconcile_skipped_locked_escalated_total",
    "Rows skipped for a lock beyond the bound, then handled by waiting for the lock (or the holder's end).",
    ["pass"],
)
INFRA_RETRIES = Counter(
    "docfence_infrastructure_retries_total",
    "Transient store or storage errors a worker retried within the attempt (no attempt spent).",
    ["target", "code"],
)
HEARTBEAT_ABANDONED = Counter(
    "docfence_heartbeats_abandoned_total",
    "Heartbeats that had not returned before a held lease would lapse (a partition or a frozen store).")
LOOP_ERRORS = Counter(
    "docfence_loop_errors_total", "Unexpected exceptions a long-running loop survived, by loop.", ["loop"])
INTERNAL_ERRORS = Counter(
    "docfence_internal_errors_total",
    "Attempts failed with internal_error (a bug: its error id names the traceback in the log).")

ENCRYPTION_FAILURES = Counter(
    "docfence_encryption_failures_total",
    "Sealing or opening a job's bytes or data key failed (a tampered object, a lost or unreachable KEK).",
    ["op", "code"],
)
REWRAPS = Counter(
    "docfence_rewraps_total", "Data keys rewrapped under the current key-encryption key (rotation).")

HTTP_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
HTTP_REQUESTS = Counter(
    "docfence_http_requests_total", "HTTP requests answered by the API, by route template and status.",
    ["method", "route", "status"],
)
HTTP_DURATION = Histogram(
    "docfence_http_request_duration_seconds", "Time from request to the response's start, by route template.",
    ["method", "route"], buckets=HTTP_SECONDS,
)
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})

# Known label values start at zero, so their series exist before the first event: an alert's rate()
# has something to compare, and with PROMETHEUS_MULTIPROC_DIR (where a family appears only once one of
# its series was written) `reconcile --metrics-port` shows its counters from the start.
for _outcome in ("requeued", "failed"):
    RECLAIMED.labels(_outcome)
for _claimed in sorted(_MODES):
    CLAIMS.labels(_claimed)
for _reason in DISCARD_REASONS:
    DISCARDED.labels(_reason)
for _poll in POLL_OUTCOMES:
    PROVIDER_POLLS.labels(_poll)
for _mode_name in sorted(_MODES):  # the validation-failure rate has a series before its first failure
    VALIDATION_FAILURES.labels("unknown", _mode_name)
for _pass in ("lease_expired", "deadline_reached"):
    SKIPPED_LOCKED.labels(_pass)
    SKIPPED_LOCKED_ESCALATED.labels(_pass)
for _op in ENCRYPTION_OPS:  # the encryption-failure alert has a series before the first failure
    for _code in ENCRYPTION_CODES:
        ENCRYPTION_FAILURES.labels(_op, _code)


def multiprocess_enabled() -> bool:
    """Whether prometheus_client chose its multi-process value class (PROMETHEUS_MULTIPROC_DIR set)."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


def page_bucket(pages: int) -> str:
    """The bucket label of a page count; `unknown` for 0 (a render that failed before counting pages)."""
    if pages <= 0:
        return "unknown"
    for limit, name in PAGE_BUCKETS:
        if pages <= limit:
            return name
    return PAGE_BUCKET_OVERFLOW


def _label(value: str | None, default: str = "none") -> str:
    """Codes and check names are our own identifiers; still, bound them (cardinality, no free text)."""
    if not value:
        return default
    text = "".join(ch if ch.isalnum() or ch in "_-./" else "_" for ch in value)
    return text[:_MAX_LABEL]


def _mode(mode: str | None) -> str:
    return mode if mode in _MODES else "other"


def record_render(mode: str, pages: int, seconds: float, *, ok: bool = True) -> None:
    """One attempt's render (child start to outcome); `pages` as the outcome reports them (0: unknown)."""
    outcome = "ok" if ok else "error"
    RENDER_DURATION.labels(_mode(mode), page_bucket(pages), outcome).observe(max(0.0, seconds))


def record_http(method: str, route: str, status: int, seconds: float) -> None:
    """One API request; `route` is the route's template ("/v1/jobs/{job_id}"), never the raw path (it
    may carry a signed URL's token), so the label set stays bounded."""
    verb = method if method in _METHODS else "other"
    template = route[:96] if route.startswith("/") else "unrouted"  # templates are the app's own
    HTTP_REQUESTS.labels(verb, template, str(int(status))).inc()
    HTTP_DURATION.labels(verb, template).observe(max(0.0, seconds))


def record_claimed(mode: str, n: int = 1) -> None:
    if n > 0:
        CLAIMS.labels(_mode(mode)).inc(n)


def record_terminal(job: Job) -> None:
    """Call once with the Job a transition returned when `job.state` is terminal (ignored otherwise)."""
    if not job.state.terminal:
        return
    code = "ok" if job.state is JobState.SUCCEEDED else _label(job.last_error_code)
    TERMINAL.labels(job.state.value, code, _mode(job.mode)).inc()
    ATTEMPTS.labels(job.state.value).observe(job.attempt)
    if job.finished_at is not None:
        seconds = (job.finished_at - job.created_at).total_seconds()
        TIME_TO_TERMINAL.labels(job.state.value, _mode(job.mode)).observe(max(0.0, seconds))


def record_terminals(jobs: Iterable[Job]) -> None:
    for job in jobs:
        record_terminal(job)


def record_lease_expired(n: int) -> None:
    if n > 0:
        LEASE_EXPIRED.inc(n)


def record_reclaimed(n: int, *, outcome: str = "requeued") -> None:
    """`outcome`: requeued (another attempt follows) or failed (attempts were exhausted)."""
    if n > 0:
        RECLAIMED.labels(outcome if outcome in ("requeued", "failed") else "other").inc(n)


def record_reconcile(requeued: int, failed: int) -> None:
    """One reconciler pass's expired-lease outcome: both count as expirations."""
    record_lease_expired(requeued + failed)
    record_reclaimed(requeued, outcome="requeued")
    record_reclaimed(failed, outcome="failed")


def record_discarded(reason: str) -> None:
    """`reason`: lease_lost, stale_commit, stale_fail, commit_unknown (store unreachable at commit)."""
    DISCARDED.labels(_label(reason)).inc()


def record_skipped_locked(pass_name: str, n: int, *, escalated: int = 0) -> None:
    """`pass_name`: lease_expired or deadline_reached; rows a pass skipped for a lock, and how many of
    them it then handled by escalation."""
    if n > 0:
        SKIPPED_LOCKED.labels(_label(pass_name)).inc(n)
    if escalated > 0:
        SKIPPED_LOCKED_ESCALATED.labels(_label(pass_name)).inc(escalated)


def record_infra_retry(target: str, code: str) -> None:
    """`target`: store or storage; `code`: the error's stable code (store_unavailable, storage_full...)."""
    INFRA_RETRIES.labels(_label(target), _label(code)).inc()


def record_heartbeat_abandoned() -> None:
    HEARTBEAT_ABANDONED.inc()


def record_loop_error(loop: str) -> None:
    """`loop`: the loop's fixed name (reconciler, webhooks, reports, scheduler, ...)."""
    LOOP_ERRORS.labels(_label(loop)).inc()


def record_internal_error() -> None:
    INTERNAL_ERRORS.inc()


def record_validation_failure(check: str, mode: str = "other") -> None:
    VALIDATION_FAILURES.labels(_label(check, "unknown"), _mode(mode)).inc()


def failed_checks(report: Mapping[str, Any] | None) -> list[str]:
    """Names of the failed checks of a validation report ({"checks": [{"name", "ok"}, ...]})."""
    if not report:
        return []
    checks = report.get("checks", [])
    return [str(c.get("name")) for c in checks if isinstance(c, Mapping) and not c.get("ok")]


def record_validation_report(report: Mapping[str, Any] | None, mode: str) -> None:
    """Count each failed check of a report; a validation failure without a report counts as `unknown`."""
    names = failed_checks(report) or ["unknown"]
    for name in names:
        record_validation_failure(name, mode)


def record_provider_poll(outcome: str) -> None:
    PROVIDER_POLLS.labels(_label(outcome)).inc()


def record_provider_observation(kind: str) -> None:
    PROVIDER_OBSERVATIONS.labels(_label(kind)).inc()


def count_encryption_failure(op: str, code: str) -> None:
    """One failure to seal, open, wrap or unwrap a job's bytes or data key; `code` is the error's code."""
    ENCRYPTION_FAILURES.labels(op if op in ENCRYPTION_OPS else "other", _label(code, "unknown")).inc()


def count_rewraps(n: int) -> None:
    """`n` data keys rewrapped under the current key-encryption key by a rewrap pass."""
    if n > 0:
        REWRAPS.inc(n)
