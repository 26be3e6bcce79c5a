"""The parent's lease keeper: renews every held lease on an interval and says when one is lost.

A lease is lost when the store refuses it, or when the store cannot be reached long enough that the
lease may have expired (judged on this process's monotonic clock, never extended by it).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from docfence.core.clock import monotonic
from docfence.core.errors import StoreError
from docfence.faults import fault_point
from docfence.store.base import JobStore

log = logging.getLogger("docfence.worker")


@dataclass
class Lease:
    job_id: str
    attempt: int
    ttl_s: float
    confirmed_at: float = field(default_factory=monotonic)
    lost: threading.Event = field(default_factory=threading.Event)


class LeaseKeeper:
    def __init__(self, store: JobStore, worker: str, interval_s: float) -> None:
        self.store, self.worker, self.interval_s = store, worker, interval_s
        self._leases: dict[tuple[str, int], Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def hold(self, job_id: str, attempt: int, ttl_s: float) -> Lease:
        lease = Lease(job_id, attempt, ttl_s)
        with self._lock:
            self._leases[(job_id, attempt)] = lease
        return lease

    def drop(self, lease: Lease) -> None:
        with self._lock:
            self._leases.pop((lease.job_id, lease.attempt), None)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.renew_once()

    def renew_once(self) -> None:
        with self._lock:
            leases = list(self._leases.values())
        if not leases:
            return
        started = monotonic()
        try:
            fault_point("heartbeat", store=self.store)
            held = self.store.heartbeat_many([(x.job_id, x.attempt) for x in leases], self.worker)
        except StoreError as exc:
            log.warning("heartbeat failed: %s", exc.code, extra={"worker": self.worker})
            for lease in leases:  # unconfirmed for a whole TTL: it may have expired; stop the work
                if monotonic() - lease.confirmed_at >= lease.ttl_s * 0.9:
                    self._mark_lost(lease, "unconfirmed")
            return
        for lease in leases:
            if (lease.job_id, lease.attempt) in held:
                lease.confirmed_at = started
            else:
                self._mark_lost(lease, "refused")

    def _mark_lost(self, lease: Lease, why: str) -> None:
        if not lease.lost.is_set():
            log.warning("lease lost (%s)", why, extra={"job_id": lease.job_id, "attempt": lease.attempt})
            lease.lost.set()
