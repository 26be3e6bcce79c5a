"""Store-derived gauges computed at scrape time: queue depth, job age by state, jobs past their deadline,
valid and expired leases, paused scopes. Read from the shared store, so correct across any number of
machines; every query is bounded (at most `max_scan` jobs per non-terminal state)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from docfence.core.clock import monotonic, utcnow
from docfence.core.errors import DocfenceError
from docfence.core.policy import Mode
from docfence.core.records import Job
from docfence.core.states import ACTIVE_STATES, JobState
from docfence.store.base import JobStore, OpsStore


class GaugeStore(JobStore, OpsStore, Protocol):
    """What the gauges read: job lists and the store clock, state counts, pauses and valid leases."""


log = logging.getLogger("docfence.metrics")

AGE_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0, 86400.0)
_ORDERED_ACTIVE = (JobState.QUEUED, JobState.RENDERING)


@dataclass
class ActiveScan:
    """What a bounded scan of one non-terminal state found."""

    state: JobState
    ages: list[float] = field(default_factory=list)
    overdue: list[float] = field(default_factory=list)  # seconds past the deadline, for jobs past it
    expired_leases: int = 0
    truncated: bool = False


def scan_active(store: JobStore, state: JobState, now: datetime, *, max_scan: int = 5000,
                page: int = 500, tenant: str | None = None) -> ActiveScan:
    """Page through `list_jobs(state=...)` (newest first) until `max_scan` jobs; oldest ages come last."""
    assert state in ACTIVE_STATES
    scan, seen = ActiveScan(state), set[str]()
    before: datetime | None = None
    while len(seen) < max_scan:
        want = min(page, max_scan - len(seen))
        jobs = store.list_jobs(state=state, tenant=tenant, created_before=before, limit=want)
        for job in jobs:
            if job.id not in seen:
                seen.add(job.id)
                _account(scan, job, now)
        if len(jobs) < want:
            return scan
        if jobs[0].created_at == jobs[-1].created_at:  # a full page of one timestamp: cannot page on
            scan.truncated = True
            return scan
        before = jobs[-1].created_at
    scan.truncated = True
    return scan


def _account(scan: ActiveScan, job: Job, now: datetime) -> None:
    scan.ages.append(max(0.0, (now - job.created_at).total_seconds()))
    past = (now - job.deadline_at).total_seconds()
    if past > 0:
        scan.overdue.append(past)
    if job.state is JobState.RENDERING and (job.lease_expires_at is None or job.lease_expires_at <= now):
        scan.expired_leases += 1


class StoreCollector(Collector):
    """A prometheus_client collector over the Store API; register one per scrape registry."""

    def __init__(self, store: GaugeStore, *, max_scan: int = 5000) -> None:
        self.store, self.max_scan = store, max_scan

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # computed at scrape time; nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily | GaugeHistogramMetricFamily]:
        started = monotonic()
        up = GaugeMetricFamily("docfence_store_up", "1 when the store answered this scrape's queries.")
        try:
            families = list(self._families())
        except DocfenceError as exc:
            log.warning("metrics scrape could not read the store: %s", exc.code)
            families = []
        up.add_metric([], 1.0 if families else 0.0)
        yield up
        yield from families
        took = GaugeMetricFamily("docfence_store_scrape_seconds", "Time the store-derived metrics took.")
        took.add_metric([], monotonic() - started)
        yield took

    def _families(self) -> Iterator[GaugeMetricFamily | GaugeHistogramMetricFamily]:
        now = self.store.now()
        yield _gauge("docfence_store_clock_offset_seconds",
                     "This process's clock minus the store's clock (leases and deadlines use the store's).",
                     [([], (utcnow() - now).total_seconds())])
        counts = self.store.count_by_state()
        yield _gauge("docfence_jobs", "Jobs by state (queue depth for queued).", [
            ([s.value], float(counts.get(s.value, 0))) for s in JobState], ["state"])
        scans = [scan_active(self.store, s, now, max_scan=self.max_scan) for s in _ORDERED_ACTIVE]
        yield from _age_families(scans)
        valid = [([m.value], float(self.store.valid_lease_count(mode=m.value))) for m in Mode]
        yield _gauge("docfence_leases_valid", "Rendering jobs whose lease is still valid.", valid, ["mode"])
        yield _gauge("docfence_leases_expired",
                     "Rendering jobs whose lease expired and that the reconciler has not requeued yet.",
                     [([], float(scans[1].expired_leases))])
        paused = [([scope], 1.0) for scope in self.store.paused_scopes()]
        yield _gauge("docfence_claims_paused", "1 for each paused claim scope (all, vector, raster).",
                     paused, ["scope"])


def _age_families(scans: list[ActiveScan]) -> Iterator[GaugeMetricFamily | GaugeHistogramMetricFamily]:
    oldest = [([s.state.value], max(s.ages, default=0.0)) for s in scans]
    yield _gauge("docfence_job_oldest_age_seconds", "Age (since submission) of the oldest job in a state.",
                 oldest, ["state"])
    hist = GaugeHistogramMetricFamily("docfence_job_age_seconds",
                                      "Non-terminal jobs by age since submission.", labels=["state"])
    for scan in scans:
        buckets = [(_le(b), float(sum(1 for a in scan.ages if a <= b))) for b in AGE_BUCKETS]
        buckets.append(("+Inf", float(len(scan.ages))))
        hist.add_metric([scan.state.value], buckets, gsum_value=sum(scan.ages))
    yield hist
    yield _gauge("docfence_jobs_past_deadline",
                 "Non-terminal jobs whose deadline has passed (the reconciler cancels them).",
                 [([s.state.value], float(len(s.overdue))) for s in scans], ["state"])
    yield _gauge("docfence_job_max_overdue_seconds",
                 "The longest time any non-terminal job has been past its deadline (0: none).",
                 [([s.state.value], max(s.overdue, default=0.0)) for s in scans], ["state"])
    yield _gauge("docfence_job_scan_truncated", "1 when a state held more jobs than one scrape examines.",
                 [([s.state.value], 1.0 if s.truncated else 0.0) for s in scans], ["state"])


def _le(bound: float) -> str:
    return f"{bound:g}" if bound != int(bound) else f"{int(bound)}.0"


def _gauge(name: str, doc: str, samples: list[tuple[list[str], float]],
           labels: list[str] | None = None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels or [])
    for label_values, value in samples:
        family.add_metric(label_values, value)
    return family
