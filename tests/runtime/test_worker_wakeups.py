"""An idle worker starts a job when its submission is announced, on both stores: its safety poll is
an hour, so only the wake-up can start the job; HANG_GUARD_S only stops a broken build from hanging."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

from docfence.blobs.regions import RegionRouter
from docfence.config import Settings, WorkerConfig
from docfence.core.states import JobState
from docfence.samples.pdfs import links
from docfence.service import Principal, Service, SubmitRequest
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.testing.wakeup_probe import HANG_GUARD_S
from docfence.worker.runner import Worker


class WaitCounting:
    """The real store; each time the worker begins an idle wait, `waits` is released once."""

    def __init__(self, store: Any) -> None:
        self._store, self.waits = store, threading.Semaphore(0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def wait_for_work(self, timeout_s: float, **kwargs: Any) -> bool:
        self.waits.release()
        return bool(self._store.wait_for_work(timeout_s, **kwargs))


def test_an_idle_worker_starts_a_job_when_its_submission_is_announced(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(storage_url=f"file://{tmp_path / 'objects'}",
                        worker=WorkerConfig(poll_interval_s=3600.0, reconcile_in_process=False),
                        limits=LONG_BUDGET_LIMITS)  # no render budget runs out under load
    regions = RegionRouter.from_config(settings.region_urls())
    counting = WaitCounting(store)
    worker = Worker(settings, counting, regions)  # type: ignore[arg-type]
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        # The first wait of a thread returns once the listener listens; the second comes after a
        # claim that found nothing, so the worker is idle with an hour to sleep.
        assert counting.waits.acquire(timeout=HANG_GUARD_S)
        assert counting.waits.acquire(timeout=HANG_GUARD_S)
        service = Service(settings, store, regions, signing_secret=b"k" * 32)
        job, _ = service.submit(Principal("k", "t1", ("admin",)), io.BytesIO(links()), SubmitRequest())
        with store.watch_job_end([job.id]) as watch:
            while not store.get(job.id).state.terminal:
                assert watch.wait(HANG_GUARD_S), "the job did not end"
        assert store.get(job.id).state is JobState.SUCCEEDED
    finally:
        worker.stopping.set()
        store.pause_claims("all", actor="test")  # resuming announces work: the idle worker wakes, sees
        store.resume_claims("all", actor="test")  # `stopping` and returns
        thread.join(HANG_GUARD_S)
    assert not thread.is_alive()
