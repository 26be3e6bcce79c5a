"""An answer that never came is not a "no": when the store commits a submission but its answer is lost,
the upload (and its sealed password) stays, and the client's retry with the same idempotency key gets
that job, which a real worker then renders to success. Only a definite refusal removes the bytes. On
both stores, single and batch (whole and partial)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pikepdf
import pytest
from cryptography.fernet import Fernet

from docfence.blobs import RegionRouter
from docfence.blobs.sealed import password_key
from docfence.config import Settings, WorkerConfig
from docfence.core.access import Principal
from docfence.core.clock import FakeClock, utcnow
from docfence.core.errors import IdempotencyConflict, StoreConflict, StoreUnavailable
from docfence.core.records import Job, NewJob
from docfence.core.states import JobState
from docfence.maintenance.reconciler import ReconcileConfig, Reconciler
from docfence.maintenance.staging import UNCOMMITTED_MIN_AGE_S
from docfence.samples import pdfs
from docfence.service import Service, build_service
from docfence.service.request_policy import SubmitRequest
from docfence.service.submission import refused_uncommitted
from docfence.storage_keys import input_key, job_prefix
from docfence.store.base import Store
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.worker.runner import Worker

TENANT = "acme"
PASSWORD = "lost-answer-password"
PRINCIPAL = Principal(key_id="k1", tenant=TENANT, scopes=("submit", "read"))


class LostAnswers:
    """The real store, except that its next `lose` submissions COMMIT and then raise StoreUnavailable,
    as a connection cut after the server committed but before its answer arrived would."""

    def __init__(self, store: Store) -> None:
        self._store, self.lose, self.lost = store, 0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _maybe_lose(self) -> None:
        if self.lose:
            self.lose, self.lost = self.lose - 1, self.lost + 1
            raise StoreUnavailable("the PostgreSQL connection failed")

    def submit(self, new: NewJob) -> tuple[Job, bool]:
        answer = self._store.submit(new)
        self._maybe_lose()
        return answer

    def submit_many(self, news: Sequence[NewJob], *, all_or_nothing: bool = True) -> list[Any]:
        answers = self._store.submit_many(news, all_or_nothing=all_or_nothing)
        self._maybe_lose()
        return answers


class Refusing(LostAnswers):
    """The real store, except that its next submissions are refused before anything commits."""

    def __init__(self, store: Store, error: Exception) -> None:
        super().__init__(store)
        self.error = error

    def submit(self, new: NewJob) -> tuple[Job, bool]:
        self.lost += 1
        raise self.error

    def submit_many(self, news: Sequence[NewJob], *, all_or_nothing: bool = True) -> list[Any]:
        self.lost += 1
        raise self.error


@pytest.fixture
def clock() -> FakeClock:
    """The store's clock starts at the real time, so the orphan sweep can compare it with file times."""
    return FakeClock(start=utcnow())


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(storage_url=f"file://{tmp_path / 'objects'}", limits=LONG_BUDGET_LIMITS,
                    password_key=Fernet.generate_key().decode("ascii"),
                    worker=WorkerConfig(reconcile_in_process=False))


@pytest.fixture
def lossy(store: Store) -> LostAnswers:
    return LostAnswers(store)


@pytest.fixture
def service(settings: Settings, lossy: LostAnswers, clock: FakeClock) -> Iterator[Service]:
    yield build_service(settings, lossy, clock=clock)  # type: ignore[arg-type]


def _encrypted() -> bytes:
    out = io.BytesIO()
    with pikepdf.open(io.BytesIO(pdfs.many_pages(2))) as pdf:
        pdf.save(out, encryption=pikepdf.Encryption(owner="o-" + PASSWORD, user=PASSWORD, R=6))
    return out.getvalue()


def _objects(tmp_path: Path) -> list[str]:
    root = tmp_path / "objects"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _run_worker(settings: Settings, store: Store) -> None:
    Worker(settings, store, RegionRouter.from_config(settings.region_urls())).run(until_idle=True)


def _assert_succeeded_with_input(service: Service, store: Store, job_id: str) -> None:
    done = store.get(job_id)
    assert done.state is JobState.SUCCEEDED, (done.state, done.last_error_code)
    blobs = service.router.for_region(done.region)
    assert blobs.exists(input_key(TENANT, job_id))  # the worker read it; it is still there
    artifact = store.artifact(job_id)
    assert artifact is not None and blobs.exists(artifact.key)


def test_a_lost_answer_keeps_the_upload_and_the_retry_gets_a_job_that_succeeds(
        service: Service, store: Store, lossy: LostAnswers, settings: Settings, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="docfence.service.submission")
    request = SubmitRequest(idempotency_key="retry-me", password=PASSWORD)
    locked = _encrypted()  # encryption salts differ per save: the retry sends the same bytes
    lossy.lose = 1
    with pytest.raises(StoreUnavailable):
        service.submit(PRINCIPAL, io.BytesIO(locked), request)
    assert lossy.lost == 1
    (committed,) = store.list_jobs(tenant=TENANT)  # the commit reached the database
    prefix = job_prefix(TENANT, committed.id)
    kept = _objects(tmp_path)
    assert kept == sorted([input_key(TENANT, committed.id), password_key(prefix)])
    warned = [r for r in caplog.records if getattr(r, "job_id", None) == committed.id]
    assert warned and warned[0].levelno == logging.WARNING and "outcome" in warned[0].getMessage()

    job, created = service.submit(PRINCIPAL, io.BytesIO(locked), request)  # the client's retry
    assert (job.id, created) == (committed.id, False)
    assert _objects(tmp_path) == kept  # the retry's own upload (under a new job id) was removed

    _run_worker(settings, store)
    _assert_succeeded_with_input(service, store, job.id)  # the sealed password was there too


@pytest.mark.parametrize("partial", [False, True])
def test_a_batch_whose_answer_is_lost_keeps_its_uploads_and_its_retry_succeeds(
        service: Service, store: Store, lossy: LostAnswers, settings: Settings, tmp_path: Path,
        partial: bool) -> None:
    pdf = pdfs.many_pages(1)
    keys = ["b-0", "b-1", "b-2"]
    uploads = [(io.BytesIO(pdf), SubmitRequest(idempotency_key=k)) for k in keys]
    lossy.lose = 1
    with pytest.raises(StoreUnavailable):
        service.submit_batch(PRINCIPAL, uploads, partial=partial)
    assert lossy.lost == 1
    committed = {str(j.idempotency_key): j.id for j in store.list_jobs(tenant=TENANT)}
    assert sorted(committed) == keys
    kept = _objects(tmp_path)
    assert kept == sorted(input_key(TENANT, job_id) for job_id in committed.values())

    retry = [(io.BytesIO(pdf), SubmitRequest(idempotency_key=k)) for k in keys]
    outcomes = service.submit_batch(PRINCIPAL, retry, partial=partial)
    assert [(o.job.id if o.job else None, o.status) for o in outcomes] == [
        (committed[k], "existing") for k in keys]
    assert _objects(tmp_path) == kept  # the retry's duplicate uploads were removed

    _run_worker(settings, store)
    for job_id in committed.values():
        _assert_succeeded_with_input(service, store, job_id)


@pytest.mark.parametrize("error", [StoreConflict("rolled back"), IdempotencyConflict()],
                         ids=["rolled-back", "idempotency-conflict"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_definite_refusal_leaves_no_bytes_behind(
        settings: Settings, store: Store, clock: FakeClock, tmp_path: Path, error: Exception,
        batch: bool) -> None:
    refusing = Refusing(store, error)
    service = build_service(settings, refusing, clock=clock)  # type: ignore[arg-type]
    with pytest.raises(type(error)):
        if batch:
            service.submit_batch(PRINCIPAL, [(io.BytesIO(pdfs.many_pages(1)), SubmitRequest()),
                                             (io.BytesIO(_encrypted()), SubmitRequest(password=PASSWORD))])
        else:
            service.submit(PRINCIPAL, io.BytesIO(_encrypted()), SubmitRequest(password=PASSWORD))
    assert refusing.lost == 1  # the store was asked (the bytes existed) and refused
    assert _objects(tmp_path) == []
    assert store.list_jobs(tenant=TENANT) == []


def test_bytes_kept_for_an_answer_lost_before_any_commit_are_swept_and_a_committed_jobs_never(
        settings: Settings, store: Store, clock: FakeClock, lossy: LostAnswers, service: Service,
        tmp_path: Path) -> None:
    committed_kept = SubmitRequest(idempotency_key="committed", password=PASSWORD)
    lossy.lose = 1
    with pytest.raises(StoreUnavailable):  # committed, answer lost
        service.submit(PRINCIPAL, io.BytesIO(_encrypted()), committed_kept)
    (committed,) = store.list_jobs(tenant=TENANT)
    mine = set(_objects(tmp_path))
    never = build_service(settings, Refusing(store, StoreUnavailable("cannot connect")),  # type: ignore[arg-type]
                          clock=clock)
    with pytest.raises(StoreUnavailable):  # lost before the database saw it: no row, bytes kept
        never.submit(PRINCIPAL, io.BytesIO(_encrypted()), SubmitRequest(password=PASSWORD))
    orphans = sorted(set(_objects(tmp_path)) - mine)
    assert len(orphans) == 2 and store.list_jobs(tenant=TENANT) == [committed]

    blobs = service.router.for_region("local")
    written = max(t for t in map(blobs.modified_at, orphans) if t is not None)
    reconciler = Reconciler(store, service.router, ReconcileConfig(staging_grace_s=0))

    def sweep_at(age_s: float) -> list[str]:
        clock.advance((written + timedelta(seconds=age_s) - store.now()).total_seconds())
        return sorted(reconciler.sweep_orphans())

    assert sweep_at(UNCOMMITTED_MIN_AGE_S - 1) == []  # its commit might still be on its way
    assert sweep_at(UNCOMMITTED_MIN_AGE_S + 1) == orphans  # the input and the sealed password
    assert set(_objects(tmp_path)) == mine  # the job that committed keeps its bytes


def test_only_a_definite_refusal_counts_as_not_committed() -> None:
    from docfence.core.errors import InvalidRequest, StoreError

    assert refused_uncommitted(IdempotencyConflict())
    assert refused_uncommitted(StoreConflict())
    assert refused_uncommitted(InvalidRequest("bad"))
    for unknown in (StoreUnavailable(), StoreError("PostgreSQL error (XX000)"), RuntimeError("bug"),
                    KeyboardInterrupt()):
        assert not refused_uncommitted(unknown)
