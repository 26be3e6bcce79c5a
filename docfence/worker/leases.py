"""The parent's lease keeper: renews every held lease on an interval and says when one is lost.

A lease is lost when the store refuses it, or when it has gone unconfirmed for LOST_AFTER of its TTL
(judged on this process's monotonic clock, never extended by it): the store failed to answer, or a
heartbeat has not returned at all (a partition black-holes the connection). The heartbeat itself runs
on a helper thread, at most one in flight, so the keeper's watchdog marks leases lost while it hangs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from docfence.core.clock import monotonic
from docfence.core.errors import StoreError
from docfence.core.loops import report_failure
from docfence.faults import fault_point
from docfence.observability import metrics
from docfence.store.base import JobStore

log = logging.getLogger("docfence.worker")

LOST_AFTER = 0.9  # of a lease's TTL without a confirmation: it may expire before the next one comes


@dataclass
class Lease:
    job_id: str
    attempt: int
    ttl_s: float
    confirmed_at: float = field(default_factory=monotonic)
    lost: threading.Event = field(default_factory=threading.Event)

    def unconfirmed_too_long(self, now: float) -> bool:
        return now - self.confirmed_at >= self.ttl_s * LOST_AFTER


def close_thread_connection(store: object) -> None:
    """Close the calling thread's own store connection (each thread keeps one), when it ends."""
    close = getattr(store, "close_thread_connection", None)  # SQL stores have one; test doubles may not
    if callable(close):
        with contextlib.suppress(Exception):
            close()


def store_thread(store: object, run: Callable[[], None], name: str) -> threading.Thread:
    """A daemon thread running `run` that closes its own connection of `store` when `run` returns or
    raises, instead of leaving it open until the store is closed."""
    def target() -> None:
        try:
            run()
        finally:
            close_thread_connection(store)

    return threading.Thread(target=target, name=name, daemon=True)


class LeaseKeeper:
    """`hold` a lease while its attempt works, `drop` it once settled. Every `interval_s` the keeper
    thread checks every lease's age (the watchdog) and starts a heartbeat unless one is in flight."""

    def __init__(self, store: JobStore, worker: str, interval_s: float) -> None:
        self.store, self.worker, self.interval_s = store, worker, interval_s
        self._leases: dict[tuple[str, int], Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
        self._beat = threading.Condition(self._lock)  # hands one heartbeat at a time to the helper
        self._request: tuple[list[Lease], float] | None = None
        self._in_flight_since: float | None = None  # monotonic start of the heartbeat not yet returned
        self._abandoned = False  # the one in flight was given up for (counted once)
        self._helper = store_thread(store, self._beat_until_stopped, "heartbeat")

    def start(self) -> None:
        self._thread.start()
        self._helper.start()

    def stop(self) -> None:
        """Stop both threads; a heartbeat that hangs is not waited for past a short bound."""
        with self._lock:
            self._stop.set()
            self._beat.notify_all()
        self._thread.join(timeout=5)
        self._helper.join(timeout=1)

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
            try:
                self.check_leases()
                self.renew_once()
            except Exception as exc:  # the keeper must outlive any bug of its own: leases depend on it
                report_failure("lease keeper pass", exc, log)
                metrics.record_loop_error("lease_keeper")

    def check_leases(self) -> None:
        """The watchdog: mark lost every lease unconfirmed for LOST_AFTER of its TTL, whether the
        heartbeats failed or one has not returned (then it is abandoned: counted and logged)."""
        now = monotonic()
        with self._lock:
            late = [x for x in self._leases.values() if not x.lost.is_set() and x.unconfirmed_too_long(now)]
            hanging = self._in_flight_since
            if late and hanging is not None and not self._abandoned:
                self._abandoned = True
                metrics.record_heartbeat_abandoned()
        for lease in late:
            if hanging is not None:
                self._mark_lost(lease, f"heartbeat abandoned: no answer for {now - hanging:.1f} s")
            else:
                self._mark_lost(lease, "unconfirmed")

    def renew_once(self) -> None:
        """Hand a heartbeat of every held lease to the helper thread, unless one is still in flight."""
        with self._lock:
            leases = [x for x in self._leases.values() if not x.lost.is_set()]
            if not leases or self._in_flight_since is not None or self._request is not None:
                return
            self._request = (leases, monotonic())
            self._beat.notify_all()

    def _beat_until_stopped(self) -> None:
        """The helper thread: one heartbeat at a time, its answer applied when (if ever) it comes."""
        while True:
            with self._lock:
                while self._request is None and not self._stop.is_set():
                    self._beat.wait()
                if self._stop.is_set():
                    return
                assert self._request is not None
                (leases, started), self._request = self._request, None
                self._in_flight_since, self._abandoned = started, False
            try:
                self._heartbeat(leases, started)
            except Exception as exc:  # the helper outlives it; the watchdog judges the leases
                report_failure("heartbeat", exc, log)
                metrics.record_loop_error("lease_keeper")
            finally:
                with self._lock:
                    self._in_flight_since = None

    def _heartbeat(self, leases: Sequence[Lease], started: float) -> None:
        try:
            fault_point("heartbeat", store=self.store)
            held = self.store.heartbeat_many([(x.job_id, x.attempt) for x in leases], self.worker)
        except StoreError as exc:  # the watchdog marks leases lost once unconfirmed for too long
            log.warning("heartbeat failed: %s", exc.code, extra={"worker": self.worker})
            return
        for lease in leases:
            if (lease.job_id, lease.attempt) in held:
                lease.confirmed_at = max(lease.confirmed_at, started)
            else:
                self._mark_lost(lease, "refused")

    def _mark_lost(self, lease: Lease, why: str) -> None:
        if not lease.lost.is_set():
            log.warning("lease lost (%s)", why, extra={"job_id": lease.job_id, "attempt": lease.attempt})
            lease.lost.set()
