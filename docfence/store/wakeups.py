"""Wake-ups instead of polling: the interface both stores offer (`Wakeups`), and the in-process fan-out
that hands one listener's announcements ("jobs were queued", "these jobs ended") to every waiter.

Announcements are hints sent only for committed transitions; a woken caller re-reads the rows, which
are the truth. A waiter never depends on them alone: it always passes a timeout (the slow safety poll).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from docfence.core.clock import monotonic

log = logging.getLogger("docfence.store.wakeups")

STOP_CHECK_S = 0.1  # how soon a work waiter notices its `stop` event


class Wakeups(Protocol):
    """What a waiter may ask of a store. Both methods are safe from any thread."""

    def wait_for_work(self, timeout_s: float, *, stop: threading.Event | None = None) -> bool:
        """Block until jobs may have been queued since this thread's previous call returned, until
        `timeout_s` passes, or until `stop` is set; True when woken. Call it right after a claim found
        nothing: a submission committed after that claim always wakes the call (or makes it return at
        once). The first call of a thread returns as soon as the listener listens."""
        ...

    def watch_job_end(
        self, job_ids: Iterable[str], *, on_wake: Callable[[], None] | None = None
    ) -> JobEndWatch:
        """Start watching for the end of `job_ids` in this process. Start the watch *before* reading
        the jobs: an end committed after the watch started always wakes it."""
        ...


class JobEndWatch:
    """One subscription to the end (a terminal state) of some jobs. Wakes when one of them is
    announced ended, or when announcements may have been missed (the listener reconnected): either
    way the holder re-reads the jobs. `on_wake` runs in the listener's thread and must return at once
    (e.g. `loop.call_soon_threadsafe`). Close it (or use it as a context manager) when done."""

    def __init__(self, fanout: Fanout, job_ids: Iterable[str],
                 on_wake: Callable[[], None] | None) -> None:
        self.job_ids = frozenset(job_ids)
        self._fanout, self._on_wake = fanout, on_wake
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._announced: set[str] = set()

    def wait(self, timeout_s: float) -> bool:
        """Block until woken or `timeout_s` passes; True when woken. The wake is consumed on return,
        so re-read the jobs after this returns (a wake that arrives meanwhile is then already seen)."""
        woken = self._event.wait(max(0.0, timeout_s))
        self._event.clear()
        return woken

    def take_announced(self) -> set[str]:
        """The watched ids named by announcements since the previous call (a reconnect names none)."""
        with self._lock:
            taken, self._announced = self._announced, set()
        return taken

    def close(self) -> None:
        self._fanout.remove(self)

    def __enter__(self) -> JobEndWatch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _wake(self, ids: Iterable[str]) -> None:
        with self._lock:
            self._announced.update(ids)
        self._event.set()
        if self._on_wake is not None:
            try:
                self._on_wake()
            except Exception:  # e.g. the waiter's event loop closed meanwhile; the waiter is gone
                log.debug("a wake-up callback failed", exc_info=True)


class Fanout:
    """Announcements of one database, fanned out to this process's waiters. Work waiters compare a
    counter ("generation") that each work announcement advances; end watches are indexed by job id."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._work_gen = 0  # 0 until the listener first listens (which counts as a possible miss)
        self._by_job: dict[str, set[JobEndWatch]] = {}

    def work_generation(self) -> int:
        """How many work announcements (and possible misses) this process has heard (tests look)."""
        with self._cond:
            return self._work_gen

    def work_announced(self) -> None:
        with self._cond:
            self._work_gen += 1
            self._cond.notify_all()

    def jobs_ended(self, job_ids: Iterable[str]) -> None:
        hits: dict[JobEndWatch, list[str]] = {}
        with self._cond:
            for job_id in job_ids:
                for watch in self._by_job.get(job_id, ()):
                    hits.setdefault(watch, []).append(job_id)
        for watch, ids in hits.items():  # outside the lock: callbacks may take their own locks
            watch._wake(ids)

    def missed_announcements(self) -> None:
        """The listener (re)started, or may have dropped announcements: wake every waiter so each
        re-reads what it waits for."""
        with self._cond:
            self._work_gen += 1
            self._cond.notify_all()
            watches = {w for ws in self._by_job.values() for w in ws}
        for watch in watches:
            watch._wake(())

    def wait_for_work(self, seen: int, timeout_s: float, stop: threading.Event | None = None) -> int:
        """Block until the generation differs from `seen`, the timeout passes or `stop` is set;
        returns the generation. `stop` is looked at every STOP_CHECK_S (an in-memory flag)."""
        until = monotonic() + max(0.0, timeout_s)
        with self._cond:
            while self._work_gen == seen and not (stop is not None and stop.is_set()):
                remaining = until - monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining if stop is None else min(remaining, STOP_CHECK_S))
            return self._work_gen

    def watch(self, job_ids: Iterable[str], on_wake: Callable[[], None] | None) -> JobEndWatch:
        watch = JobEndWatch(self, job_ids, on_wake)
        with self._cond:
            for job_id in watch.job_ids:
                self._by_job.setdefault(job_id, set()).add(watch)
        return watch

    def remove(self, watch: JobEndWatch) -> None:
        with self._cond:
            for job_id in watch.job_ids:
                watches = self._by_job.get(job_id)
                if watches is not None:
                    watches.discard(watch)
                    if not watches:
                        del self._by_job[job_id]

    def watched_jobs(self) -> set[str]:
        """The job ids someone in this process is watching (tests and benchmarks look)."""
        with self._cond:
            return set(self._by_job)


class Listener:
    """Receives one database's announcements for this process and hands them to `fanout`. A dialect
    subclasses it; after every (re)start it calls `fanout.missed_announcements()`."""

    def __init__(self) -> None:
        self.fanout = Fanout()

    def start(self) -> None:
        """Begin listening (idempotent, returns quickly; a connection may still be on its way)."""

    def check(self) -> None:
        """A cheap health check before each wait; repairs what it can."""

    def close(self) -> None:
        """Stop listening and release everything (threads, connections, sockets)."""


@dataclass
class _Entry:
    listener: Listener
    refs: int


_registry: dict[str, _Entry] = {}
_registry_lock = threading.Lock()
_registry_pid = os.getpid()
_store_lock = threading.Lock()  # guards each store's lazy acquire (taken before _registry_lock)


def acquire_listener(key: str, factory: Callable[[], Listener]) -> Listener:
    """The one started listener of this process for `key` (a database), shared by every store
    object that names the same database; release it with `release_listener`."""
    global _registry_pid
    with _registry_lock:
        if os.getpid() != _registry_pid:  # a forked child inherits the entries but not their threads
            _registry.clear()
            _registry_pid = os.getpid()
        entry = _registry.get(key)
        if entry is None:
            entry = _registry[key] = _Entry(factory(), 0)
        entry.refs += 1
        entry.listener.start()
        return entry.listener


def release_listener(key: str, listener: Listener) -> None:
    """Drop one reference; the last one closes the listener."""
    with _registry_lock:
        entry = _registry.get(key)
        if entry is None or entry.listener is not listener:
            return
        entry.refs -= 1
        if entry.refs > 0:
            return
        del _registry[key]
    listener.close()


class WakeupWaits:
    """`Wakeups` for a store: the dialect names its database (`_wakeup_key`) and builds its listener
    (`_new_listener`); the listener is started on first use and released by `_release_wakeups`."""

    _wakeup_listener: Listener | None = None
    _wakeup_pid = 0
    _wakeup_seen: threading.local

    def _wakeup_key(self) -> str:
        raise NotImplementedError

    def _new_listener(self) -> Listener:
        raise NotImplementedError

    def wait_for_work(self, timeout_s: float, *, stop: threading.Event | None = None) -> bool:
        listener = self._wakeups()
        seen: int = getattr(self._wakeup_seen, "gen", 0)
        gen = listener.fanout.wait_for_work(seen, timeout_s, stop)
        self._wakeup_seen.gen = gen
        return gen != seen

    def watch_job_end(
        self, job_ids: Iterable[str], *, on_wake: Callable[[], None] | None = None
    ) -> JobEndWatch:
        return self._wakeups().fanout.watch(job_ids, on_wake)

    def wakeup_listener(self) -> Listener:
        """This store's started listener (tests and benchmarks inspect it)."""
        return self._wakeups()

    def _wakeups(self) -> Listener:
        with _store_lock:
            if self._wakeup_listener is None or self._wakeup_pid != os.getpid():  # first use, or forked
                self._wakeup_listener = acquire_listener(self._wakeup_key(), self._new_listener)
                self._wakeup_pid, self._wakeup_seen = os.getpid(), threading.local()
            listener = self._wakeup_listener
        listener.check()
        return listener

    def _release_wakeups(self) -> None:
        with _store_lock:
            listener, self._wakeup_listener = self._wakeup_listener, None
            ours = self._wakeup_pid == os.getpid()
        if listener is not None and ours:
            release_listener(self._wakeup_key(), listener)
