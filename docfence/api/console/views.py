"""What the console's JSON endpoints compute: counts, the job table, chart series. Bounded store reads
only; a tenant key sees its own tenant only, an operator every tenant. No document content, keys or
storage keys."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from docfence.core.errors import InvalidRequest, NotFound
from docfence.core.records import Job
from docfence.core.states import TERMINAL_STATES, JobState
from docfence.observability.collector import AGE_BUCKETS, scan_active
from docfence.observability.metrics import page_bucket
from docfence.store.base import JobStore, OpsStore, ReportStore


class ConsoleStore(JobStore, OpsStore, ReportStore, Protocol):
    """What the console's search and counts read: jobs, state counts, the jobs of a report request."""


TABLE_LIMIT = 200
PREVIEW_ROWS = 10  # rows a bulk action's confirmation lists by name (it states the count of them all)
CANCELABLE = ("queued", "rendering")
COUNT_LIMIT = 1000  # per-tenant counts are bounded scans (the global count is one GROUP BY)
DURATION_SAMPLE = 100
THROUGHPUT_MINUTES = 60


def unmasked(name: str) -> str:
    return name


def job_row(job: Job, now: datetime, worker_name: Callable[[str], str] = unmasked) -> dict[str, Any]:
    """One table row. `worker_name` masks the lease holder for keys that may not see hosts and pids.
    `lease_expired`: rendering with a lease past its expiry (the worker is gone or stalled; the
    reconciler will requeue it). `overdue`: not finished and past its deadline."""
    active = not job.state.terminal
    lease_in = (job.lease_expires_at - now).total_seconds() if job.lease_expires_at and active else None
    return {"id": job.id, "tenant": job.tenant, "state": job.state.value, "mode": job.mode,
            "document_class": job.document_class, "kind": job.kind, "attempt": job.attempt,
            "max_attempts": job.max_attempts, "age_s": round((now - job.created_at).total_seconds(), 1),
            "deadline_in_s": round((job.deadline_at - now).total_seconds(), 1),
            "label": job.label or job.report_request_id, "filename": job.filename,
            "lease_owner": worker_name(job.lease_owner) if job.lease_owner and active else None,
            "lease_expires_in_s": None if lease_in is None else round(lease_in, 1),
            "lease_expired": job.state is JobState.RENDERING and lease_in is not None and lease_in <= 0,
            "overdue": active and job.deadline_at <= now,
            "error": job.last_error_code, "created_at": job.created_at.isoformat()}


def cursor_of(row: dict[str, Any]) -> str:
    """The opaque cursor after a table row: its creation time and id."""
    return f"{row['created_at']}|{row['id']}"


def parse_cursor(cursor: str) -> tuple[datetime, str]:
    at, sep, job_id = cursor.partition("|")
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        when = None
    if not sep or not job_id or when is None or when.tzinfo is None:
        raise InvalidRequest("cursor: not a cursor this console returned (next_cursor)")
    return when, job_id


def find_job(store: ConsoleStore, job_id: str, *, tenant: str | None, now: datetime,
             worker_name: Callable[[str], str] = unmasked) -> list[dict[str, Any]]:
    """The search box: the job with this id, else the jobs of the report request with this id (the
    table's label), newest first, if the key's view holds them (another tenant's are not found)."""
    text = job_id.strip()
    try:
        jobs = [store.get(text)]
    except NotFound:
        jobs = list(reversed(store.request_jobs(text)))
    return [job_row(j, now, worker_name) for j in jobs if tenant is None or j.tenant == tenant]


def counts(store: ConsoleStore, tenant: str | None) -> dict[str, int]:
    if tenant is None:
        return store.count_by_state()
    return {s.value: len(store.list_jobs(state=s, tenant=tenant, limit=COUNT_LIMIT)) for s in JobState}


def jobs_table(store: JobStore, *, tenant: str | None, state: str | None, mode: str | None,
               document_class: str | None, min_age_s: float | None, now: datetime,
               worker_name: Callable[[str], str] = unmasked, limit: int = TABLE_LIMIT,
               after: tuple[datetime, str] | None = None, label: str | None = None,
               filename: str | None = None) -> list[dict[str, Any]]:
    """The job table: the same store query as `GET /v1/jobs` (filters, keyset order)."""
    jobs = store.list_jobs(state=JobState(state) if state else None, tenant=tenant, mode=mode,
                           document_class=document_class,
                           created_before=now - timedelta(seconds=min_age_s) if min_age_s else None,
                           limit=limit, after=after, label=label, filename=filename)
    return [job_row(j, now, worker_name) for j in jobs]

@dataclass(frozen=True)
class TableFilters:
    """The job table's filters as the console sends them; `text` is the search box."""

    text: str = ""
    state: str | None = None
    mode: str | None = None
    document_class: str | None = None
    tenant: str | None = None
    min_age_s: float | None = None


def table_rows(store: ConsoleStore, f: TableFilters, *, own: str | None, now: datetime,
               worker_name: Callable[[str], str] = unmasked, limit: int = TABLE_LIMIT,
               after: tuple[datetime, str] | None = None) -> list[dict[str, Any]]:
    """What the job table shows for `f` (one page): the search text finds the job with that id, else
    the jobs of the report request with that id (whatever the other filters say), else the jobs with
    that label, else with that filename, under the other filters (exact matches); no text: the
    filters alone. `own`: the key's tenant (None: an operator, who may narrow by `f.tenant`)."""
    found, match = _resolve(store, f, own=own, now=now, worker_name=worker_name)
    if found is not None:  # paged by the table's keyset (created_at, id), newest first
        keyed = sorted(((datetime.fromisoformat(r["created_at"]), r["id"]), r) for r in found)
        return [r for key, r in reversed(keyed) if after is None or key < after][:limit]
    if match is None:
        return []
    return _page(store, f, own=own, now=now, worker_name=worker_name, limit=limit, after=after,
                 label=match.label, filename=match.filename)


def cancelable_rows(store: ConsoleStore, f: TableFilters, *, own: str | None, now: datetime,
                    worker_name: Callable[[str], str] = unmasked,
                    limit: int = TABLE_LIMIT) -> tuple[list[dict[str, Any]], bool]:
    """The queued and rendering jobs among every page `table_rows` shows for `f` (resolved the same
    way), at most `limit` (queued first, newest first), and whether more match than that."""
    states = [s for s in CANCELABLE if f.state in (None, s)]
    found, match = _resolve(store, f, own=own, now=now, worker_name=worker_name)
    if found is not None:
        rows = [r for r in found if r["state"] in states]
    elif match is None:
        rows = []
    else:
        rows = [row for state in states
                for row in _page(store, replace(f, state=state), own=own, now=now, worker_name=worker_name,
                                 limit=limit + 1, label=match.label, filename=match.filename)]
    return rows[:limit], len(rows) > limit


@dataclass(frozen=True)
class _Match:
    """The column the search text matches exactly (neither: no search text)."""

    label: str | None = None
    filename: str | None = None


def _resolve(store: ConsoleStore, f: TableFilters, *, own: str | None, now: datetime,
             worker_name: Callable[[str], str]) -> tuple[list[dict[str, Any]] | None, _Match | None]:
    """How the search text reads under `f`: (rows found by job or request id, None), or (None, the
    column it matches), or (None, None) when nothing matches. The column is chosen over every page,
    so paging never switches from labels to filenames."""
    text = f.text.strip()
    if not text:
        return None, _Match()
    found = find_job(store, text, tenant=own, now=now, worker_name=worker_name)
    if found:
        return found, None
    for match in (_Match(label=text), _Match(filename=text)):
        if _page(store, f, own=own, now=now, worker_name=worker_name, limit=1, label=match.label,
                 filename=match.filename):
            return None, match
    return None, None


def _page(store: JobStore, f: TableFilters, *, own: str | None, now: datetime,
          worker_name: Callable[[str], str], limit: int, after: tuple[datetime, str] | None = None,
          label: str | None = None, filename: str | None = None) -> list[dict[str, Any]]:
    return jobs_table(store, tenant=own or f.tenant or None, state=f.state, mode=f.mode,
                      document_class=f.document_class or None, min_age_s=f.min_age_s, now=now,
                      worker_name=worker_name, limit=limit, after=after, label=label, filename=filename)


def age_chart(store: JobStore, tenant: str | None, now: datetime) -> dict[str, Any]:
    """Non-terminal jobs per age bucket, per state (a bounded scan of each state)."""
    labels = [f"<= {b:g} s" for b in AGE_BUCKETS] + [f"> {AGE_BUCKETS[-1]:g} s"]
    series: dict[str, list[int]] = {}
    oldest: dict[str, float] = {}
    for state in (JobState.QUEUED, JobState.RENDERING):
        scan = scan_active(store, state, now, max_scan=2000, tenant=tenant)
        bins = [0] * len(labels)
        for age in scan.ages:
            bins[next((i for i, b in enumerate(AGE_BUCKETS) if age <= b), len(AGE_BUCKETS))] += 1
        series[state.value] = bins
        oldest[state.value] = round(max(scan.ages, default=0.0), 1)
    return {"labels": labels, "series": series, "oldest_s": oldest}


def throughput_chart(store: JobStore, tenant: str | None, now: datetime) -> dict[str, Any]:
    """Terminal jobs per minute over the last hour, per terminal state (from recent terminal jobs)."""
    start = now - timedelta(minutes=THROUGHPUT_MINUTES)
    series: dict[str, list[int]] = {}
    for state in sorted(TERMINAL_STATES):
        bins = [0] * THROUGHPUT_MINUTES
        for job in store.list_jobs(state=state, tenant=tenant, limit=COUNT_LIMIT):
            if job.finished_at is not None and start <= job.finished_at <= now:
                minute = min(THROUGHPUT_MINUTES - 1, int((job.finished_at - start).total_seconds() // 60))
                bins[minute] += 1
        series[state.value] = bins
    return {"minutes": THROUGHPUT_MINUTES, "series": series}


def duration_chart(store: JobStore, tenant: str | None) -> dict[str, Any]:
    """Mean claim-to-commit time of the winning attempt, by mode and page bucket, over recent successes.
    (The render-only histogram is `docfence_render_duration_seconds` in /metrics.)"""
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    for job in store.list_jobs(state=JobState.SUCCEEDED, tenant=tenant, limit=DURATION_SAMPLE):
        artifact = store.artifact(job.id)
        if artifact is None:
            continue
        won = [a for a in store.attempts(job.id) if a.attempt == artifact.attempt and a.ended_at]
        if won and won[0].ended_at is not None:
            secs = (won[0].ended_at - won[0].claimed_at).total_seconds()
            sums[(job.mode, page_bucket(artifact.pages))].append(secs)
    bars = [{"mode": m, "pages": p, "mean_s": round(sum(v) / len(v), 3), "n": len(v)}
            for (m, p), v in sorted(sums.items())]
    return {"bars": bars, "sample": DURATION_SAMPLE}
