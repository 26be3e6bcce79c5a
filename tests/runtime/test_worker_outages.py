"""A worker through outages, in process on both stores: a blob store that fails and then works costs
no attempt; a deterministic storage error fails at once; a lost lease uploads nothing; a heartbeat that
never returns is abandoned by the watchdog (the lease is marked lost) and heartbeats resume after it.
Back-off delays are injected tiny, and waits end on events, so no test sleeps."""

from __future__ import annotations

import errno
import io
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from docfence.blobs.local import LocalBlobStore
from docfence.blobs.regions import RegionRouter
from docfence.config import Settings, WorkerConfig
from docfence.core.clock import monotonic
from docfence.core.errors import (
    BlobError,
    BlobNotFound,
    LeaseLost,
    StorageFull,
    StoreUnavailable,
)
from docfence.core.states import JobState
from docfence.observability import metrics
from docfence.samples.pdfs import links
from docfence.sandbox import Outcome
from docfence.service import Principal, Service, SubmitRequest
from docfence.storage_keys import staging_key
from docfence.testing.barriers import HANG_GUARD_S
from docfence.testing.procs import LONG_BUDGET_LIMITS, wait_for
from docfence.worker.leases import Lease, LeaseKeeper
from docfence.worker.outages import Backoff, OutageOutlasted, OutageRetry
from docfence.worker.runner import Worker

TINY = Backoff(first_s=0.001, cap_s=0.004)
PRINCIPAL = Principal("t", "t1", ("admin",))


class FlakyBlobs:
    """A real local blob store whose first `fail_puts` put_stream calls and first `fail_gets` get (or
    open_read) calls raise `error` (an outage), then work."""

    def __init__(self, inner: LocalBlobStore, *, fail_puts: int = 0, fail_gets: int = 0,
                 error: type[BlobError] = BlobError) -> None:
        self.inner, self.fail_puts, self.fail_gets, self.error = inner, fail_puts, fail_gets, error
        self.puts = self.gets = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get(self, key: str, **kwargs: Any) -> bytes:
        self.gets += 1
        if self.gets <= self.fail_gets:
            raise self.error("injected: storage unreachable")
        return self.inner.get(key, **kwargs)

    def open_read(self, key: str, **kwargs: Any) -> Any:  # a sealed input is read as a stream
        self.gets += 1
        if self.gets <= self.fail_gets:
            raise self.error("injected: storage unreachable")
        return self.inner.open_read(key, **kwargs)

    def put_stream(self, key: str, stream: Any, **kwargs: Any) -> Any:
        self.puts += 1
        if self.puts <= self.fail_puts:
            raise self.error("injected: storage unreachable")
        return self.inner.put_stream(key, stream, **kwargs)


def _settings(tmp_path: Path) -> Settings:
    return Settings(storage_url=f"file://{tmp_path / 'objects'}",
                    worker=WorkerConfig(reconcile_in_process=False), limits=LONG_BUDGET_LIMITS)


def _submit(settings: Settings, store: Any) -> str:
    regions = RegionRouter.from_config(settings.region_urls())
    service = Service(settings, store, regions, signing_secret=b"k" * 32)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(links()), SubmitRequest())
    return job.id


def _retries(target: str, code: str) -> float:
    return float(metrics.INFRA_RETRIES.labels(target, code)._value.get())


def test_a_blob_store_that_fails_then_works_costs_no_attempt(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = _settings(tmp_path)
    job_id = _submit(settings, store)
    blobs = FlakyBlobs(LocalBlobStore(tmp_path / "objects"), fail_gets=2, fail_puts=3)
    before = _retries("storage", "storage_error")
    caplog.set_level(logging.INFO, logger="docfence.worker")
    worker = Worker(settings, store, RegionRouter({"local": blobs}), backoff=TINY)
    counters = worker.run(until_idle=True)
    job = store.get(job_id)
    assert job.state is JobState.SUCCEEDED and job.attempt == 1, (job.state, job.last_error_code)
    assert [a.outcome for a in store.attempts(job_id)] == ["artifact_committed"]
    assert counters.succeeded == 1 and counters.retried == 0
    assert (blobs.gets, blobs.puts) == (3, 4)  # each call retried until it worked
    assert _retries("storage", "storage_error") == before + 5
    outages = [r for r in caplog.records if "storage outage" in r.getMessage()]
    assert len(outages) == 2  # one line per outage (reading, then staging), not one per try
    assert all(getattr(r, "job_id", None) == job_id and getattr(r, "attempt", None) == 1 for r in outages)


def test_a_full_disk_is_an_outage_too(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = _settings(tmp_path)
    job_id = _submit(settings, store)
    blobs = FlakyBlobs(LocalBlobStore(tmp_path / "objects"), fail_puts=2, error=StorageFull)
    before = _retries("storage", "storage_full")
    Worker(settings, store, RegionRouter({"local": blobs}), backoff=TINY).run(until_idle=True)
    job = store.get(job_id)
    assert job.state is JobState.SUCCEEDED and job.attempt == 1
    assert _retries("storage", "storage_full") == before + 2


def test_a_full_scratch_folder_is_storage_full_and_retried(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC while copying the input into the worker's scratch folder is an outage (storage_full),
    retried inside the attempt, never an internal_error."""
    settings = _settings(tmp_path)
    job_id = _submit(settings, store)
    real_write, fails = Path.write_bytes, [2]

    def full_once(path: Path, data: Any) -> int:
        if path.name == "input.pdf" and fails[0] > 0:
            fails[0] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, data)

    real_open = Path.open

    def full_once_open(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if path.name == "input.pdf" and "w" in mode and fails[0] > 0:  # a sealed input is streamed
            fails[0] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "write_bytes", full_once)
    monkeypatch.setattr(Path, "open", full_once_open)
    before = _retries("storage", "storage_full")
    Worker(settings, store, RegionRouter({"local": LocalBlobStore(tmp_path / "objects")}),
           backoff=TINY).run(until_idle=True)
    job = store.get(job_id)
    assert job.state is JobState.SUCCEEDED and job.attempt == 1, (job.state, job.last_error_code)
    assert fails == [0] and _retries("storage", "storage_full") == before + 2


def test_a_missing_input_fails_at_once_without_retries(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = _settings(tmp_path)
    job_id = _submit(settings, store)
    objects = LocalBlobStore(tmp_path / "objects")
    input_key = store.get(job_id).input_key
    assert input_key is not None and objects.delete(input_key)
    before = _retries("storage", "object_not_found")
    Worker(settings, store, RegionRouter({"local": objects}), backoff=TINY).run(until_idle=True)
    job = store.get(job_id)
    assert job.state is JobState.FAILED and job.last_error_code == "object_not_found"
    assert [a.outcome for a in store.attempts(job_id)] == ["permanent_error"]
    assert _retries("storage", "object_not_found") == before


def test_a_lost_lease_stages_nothing(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = _settings(tmp_path)
    job_id = _submit(settings, store)
    objects = LocalBlobStore(tmp_path / "objects")
    worker = Worker(settings, store, RegionRouter({"local": objects}), backoff=TINY)
    (claim,) = store.claim(worker.id)
    lease = Lease(job_id, claim.attempt, 30.0)
    lease.lost.set()  # the watchdog marked it lost while the render ran to its end
    output = tmp_path / "output.pdf"
    output.write_bytes(links())
    retry = OutageRetry.for_claim(claim, lease, TINY, lambda: False)
    with pytest.raises(LeaseLost):
        worker._stage(claim, lease, output, Outcome(ok=True, pages=1), retry)
    assert not objects.exists(staging_key(claim.job.tenant, job_id, claim.attempt))
    assert worker.run(until_idle=True).claimed == 0  # only to stop it: nothing else is queued


def _retry(lease: Lease, *, budget_s: float = HANG_GUARD_S, backoff: Backoff = TINY) -> OutageRetry:
    return OutageRetry({"job_id": "j", "attempt": 1}, lease, monotonic() + budget_s, backoff)


def test_an_outage_wait_ends_at_once_when_the_lease_is_lost() -> None:
    lease = Lease("j", 1, 30.0)
    retry = _retry(lease, backoff=Backoff(first_s=3600.0, cap_s=3600.0))  # only the lease can end it
    tries: list[int] = []

    def down() -> None:
        tries.append(1)
        threading.Timer(0.0, lease.lost.set).start()
        raise StoreUnavailable("injected")

    with pytest.raises(LeaseLost):
        retry.call("recording a failure", down)
    assert tries == [1]


def test_an_outage_that_reaches_the_deadline_gives_up_and_others_pass_through() -> None:
    lease = Lease("j", 1, 30.0)

    def down() -> None:
        raise BlobError("injected")

    with pytest.raises(OutageOutlasted) as out:
        _retry(lease, budget_s=0.0).call("reading the input", down)
    assert out.value.why == "deadline" and out.value.error.code == "storage_error"

    def gone() -> None:
        raise BlobNotFound("injected")

    with pytest.raises(BlobNotFound):
        _retry(lease).call("reading the input", gone)


class HangingHeartbeats:
    """The real store; heartbeat_many blocks until `release` is set (a black-holed connection)."""

    def __init__(self, store: Any) -> None:
        self.store, self.release, self.calls = store, threading.Event(), 0
        self.entered = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def heartbeat_many(self, leases: Any, worker: str) -> Any:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(HANG_GUARD_S)
        return self.store.heartbeat_many(leases, worker)


def test_a_heartbeat_that_never_returns_is_abandoned_and_heartbeats_resume(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = _settings(tmp_path)
    job_id = _submit(settings, store)
    (claim,) = store.claim("w")
    hanging = HangingHeartbeats(store)
    keeper = LeaseKeeper(hanging, "w", interval_s=0.02)  # type: ignore[arg-type]
    abandoned = float(metrics.HEARTBEAT_ABANDONED._value.get())
    lease = keeper.hold(job_id, claim.attempt, ttl_s=0.5)
    keeper.start()
    try:
        assert hanging.entered.wait(HANG_GUARD_S)
        assert lease.lost.wait(HANG_GUARD_S)  # the watchdog, while the heartbeat still hangs
        assert hanging.calls == 1  # at most one heartbeat in flight: none piled up behind it
        assert float(metrics.HEARTBEAT_ABANDONED._value.get()) == abandoned + 1
        assert any("heartbeat abandoned" in r.getMessage() and getattr(r, "job_id", None) == job_id
                   for r in caplog.records)
        keeper.drop(lease)
        fresh = keeper.hold(job_id, claim.attempt, ttl_s=HANG_GUARD_S)
        confirmed = fresh.confirmed_at
        hanging.release.set()  # the network heals: the late answer arrives, the next ones come
        wait_for(lambda: hanging.calls >= 2 and fresh.confirmed_at > confirmed, HANG_GUARD_S,
                 "a heartbeat after the heal to confirm the lease")
    finally:
        hanging.release.set()
        keeper.stop()
    assert not fresh.lost.is_set()


class FlakyStore:
    """The real store; the first `claims` claims and the first `fails` failure records raise
    StoreUnavailable (the store is unreachable), then they work."""

    def __init__(self, store: Any, *, claims: int = 0, fails: int = 0) -> None:
        self.store, self.claims, self.fails = store, claims, fails
        self.calls = {"claim": 0, "fail": 0}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["claim"] += 1
        if self.calls["claim"] <= self.claims:
            raise StoreUnavailable("injected: the store is unreachable")
        return self.store.claim(*args, **kwargs)

    def fail(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["fail"] += 1
        if self.calls["fail"] <= self.fails:
            raise StoreUnavailable("injected: the store is unreachable")
        return self.store.fail(*args, **kwargs)


def test_recording_a_failure_through_a_store_outage_costs_no_attempt(  # type: ignore[no-untyped-def]
        store, tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    job_id = _submit(settings, store)
    objects = LocalBlobStore(tmp_path / "objects")
    input_key = store.get(job_id).input_key
    assert input_key is not None and objects.delete(input_key)  # the attempt fails at once...
    flaky = FlakyStore(store, fails=2)  # ...and its failure is recorded on the third try
    before = _retries("store", "store_unavailable")
    Worker(settings, flaky, RegionRouter({"local": objects}), backoff=TINY).run(until_idle=True)
    job = store.get(job_id)
    assert job.state is JobState.FAILED and job.attempt == 1 and job.last_error_code == "object_not_found"
    assert flaky.calls["fail"] == 3 and _retries("store", "store_unavailable") == before + 2


def test_failed_claims_back_off_with_one_line_per_outage_then_claiming_resumes(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = _settings(tmp_path)
    job_id = _submit(settings, store)
    flaky = FlakyStore(store, claims=5)
    caplog.set_level(logging.INFO, logger="docfence.worker")
    worker = Worker(settings, flaky, RegionRouter.from_config(settings.region_urls()), backoff=TINY)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: store.get(job_id).state.terminal, HANG_GUARD_S, "the job to end")
    finally:
        worker.stopping.set()
        thread.join(HANG_GUARD_S)
    assert not thread.is_alive() and store.get(job_id).state is JobState.SUCCEEDED
    messages = [r.getMessage() for r in caplog.records]
    assert sum("claim (retried with back-off) failed" in m for m in messages) == 1  # not one per try
    assert "claims work again after 5 failed tries" in messages


def test_an_unexpected_exception_is_internal_error_and_its_text_stays_out_of_the_message(
        caplog: pytest.LogCaptureFixture) -> None:
    from docfence.worker.failures import unexpected_failure

    text = "Patient: Jane Doe"  # what a bug's message may quote

    def buggy() -> None:
        raise ValueError(text)

    with pytest.raises(ValueError) as raised:
        buggy()
    before = float(metrics.INTERNAL_ERRORS._value.get())
    failure = unexpected_failure(raised.value, {"job_id": "j", "attempt": 2})
    assert failure.code == "internal_error" and failure.retryable
    assert failure.message == f"internal error (error id {failure.error_id})"
    (record,) = [r for r in caplog.records if failure.error_id in r.getMessage()]
    assert record.levelno == logging.ERROR and getattr(record, "job_id", None) == "j"
    assert "Traceback" in record.getMessage() and "buggy" in record.getMessage()
    assert text not in record.getMessage()
    assert float(metrics.INTERNAL_ERRORS._value.get()) == before + 1


class FlakyPasswordBlobs(FlakyBlobs):
    """Only reads of the sealed password fail (the first `fail_gets` of them)."""

    def get(self, key: str, **kwargs: Any) -> bytes:
        if key.endswith("password.sealed"):
            self.gets += 1
            if self.gets <= self.fail_gets:
                raise self.error("injected: storage unreachable")
        return self.inner.get(key, **kwargs)

    def open_read(self, key: str, **kwargs: Any) -> Any:
        return self.inner.open_read(key, **kwargs)


def test_reading_the_sealed_password_through_an_outage_costs_no_attempt(  # type: ignore[no-untyped-def]
        store, tmp_path: Path) -> None:
    """The password blob is read like the input: retried within the attempt, not failed and requeued."""
    import pikepdf

    settings = _settings(tmp_path)
    locked = io.BytesIO()
    with pikepdf.open(io.BytesIO(links())) as pdf:
        pdf.save(locked, encryption=pikepdf.Encryption(owner="o-pw", user="u-pw", R=6))
    service = Service(settings, store, RegionRouter.from_config(settings.region_urls()),
                      signing_secret=b"k" * 32)
    job, _ = service.submit(PRINCIPAL, io.BytesIO(locked.getvalue()), SubmitRequest(password="u-pw"))
    blobs = FlakyPasswordBlobs(LocalBlobStore(tmp_path / "objects"), fail_gets=2)
    before = _retries("storage", "storage_error")
    Worker(settings, store, RegionRouter({"local": blobs}), backoff=TINY).run(until_idle=True)
    done = store.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.attempt == 1, (done.state, done.last_error_code)
    assert blobs.gets == 3 and _retries("storage", "storage_error") == before + 2
