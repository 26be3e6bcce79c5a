"""Key-encryption key rotation end to end on SQLite and PostgreSQL: jobs sealed under key A, rotation to
B, the rewrap pass in bounded batches (objects untouched, every job still downloads), A retired once no
row uses it; a destroyed key is never listed, one destroyed between list and update is skipped, a row
that does not unwrap fails alone, and a failing pass never stops the reconciler's other passes."""

from __future__ import annotations

import base64
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from docfence.blobs import open_blob_store
from docfence.blobs.kek import KeyRing, WrappedKey
from docfence.blobs.kek.jobs import JobKeys, RowKey
from docfence.blobs.kek.local import LocalKeyProvider, retire_key, rotate_key_file
from docfence.blobs.regions import RegionRouter
from docfence.cli import main
from docfence.config import Settings, WorkerConfig
from docfence.core.clock import FakeClock
from docfence.core.errors import ConfigError
from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob, key_fingerprint
from docfence.maintenance.deletion import DeletionService
from docfence.maintenance.reconciler import ReconcileConfig, Reconciler
from docfence.maintenance.rewrap import RewrapConfig, Rewrapper, RewrapResult
from docfence.samples.pdfs import SampleBuilder
from docfence.service import Principal, Service, SubmitRequest
from docfence.storage_keys import job_prefix
from docfence.store import open_store
from docfence.testing.procs import LONG_BUDGET_LIMITS
from docfence.worker.runner import Worker

PRINCIPAL = Principal("k1", "t1", ("admin",))


def _document(n: int) -> bytes:
    builder = SampleBuilder()
    builder.page([f"Rotation test document {n}"])
    buf = io.BytesIO()
    builder.pdf.save(buf, deterministic_id=True)
    return buf.getvalue()


def _setup(store: Any, tmp_path: Path) -> tuple[Service, Worker, Path]:
    (tmp_path / "objects").mkdir()
    settings = Settings(storage_url=f"file://{tmp_path / 'objects'}", limits=LONG_BUDGET_LIMITS,
                        worker=WorkerConfig(poll_interval_s=3600.0, reconcile_in_process=False))
    router = RegionRouter.from_config(settings.region_urls())
    kek = tmp_path / "keys" / "kek.key"
    keys = JobKeys(settings.encryption, None, provider=LocalKeyProvider(kek))
    service = Service(settings, store, router, signing_secret=b"s" * 32)
    service.job_keys = keys
    return service, Worker(settings, store, router, job_keys=keys), kek


def _download(service: Service, job_id: str) -> bytes:
    _record, presented = service.create_api_key("t1", ("admin",))
    download = service.open_signed(service.artifact_url_token(service.authenticate(presented), job_id))
    try:
        return b"".join(download.chunks)
    finally:
        download.close()


def _objects(tmp_path: Path, job_ids: list[str]) -> dict[str, bytes]:
    raw = open_blob_store(f"file://{tmp_path / 'objects'}")
    return {key: raw.get(key) for job_id in job_ids for key in raw.list(job_prefix("t1", job_id).rstrip("/"))}


def _row(job: Any) -> RowKey:
    return RowKey(job.tenant, job.id, job.data_key_provider, job.data_key_kek_id, job.data_key_wrapped)


def _rewrapper(store: Any, kek: Path, batch: int, clock: FakeClock | None = None) -> Rewrapper:
    provider = LocalKeyProvider(kek)
    return Rewrapper(store, lambda: KeyRing(provider), RewrapConfig(batch=batch), clock=clock or FakeClock())


def test_rotation_rewraps_in_bounded_batches_and_the_old_key_can_be_retired(  # type: ignore[no-untyped-def]
        store, tmp_path: Path) -> None:
    service, worker, kek = _setup(store, tmp_path)
    jobs = [service.submit(PRINCIPAL, io.BytesIO(_document(i)), SubmitRequest())[0] for i in range(4)]
    assert worker.run(until_idle=True).succeeded == 4
    deleted = jobs[3].id  # its key is destroyed: nothing to re-wrap
    DeletionService(store, service.router).delete_job(deleted, actor="dpo", request_id="DR-1")
    queued = service.submit(PRINCIPAL, io.BytesIO(_document(9)), SubmitRequest())[0]  # never rendered
    live = [j.id for j in jobs[:3]] + [queued.id]
    key_a = str(jobs[0].data_key_kek_id)
    bodies = {j: _download(service, j) for j in live[:3]}
    before_rows = {j: store.get(j) for j in live}
    before_objects = _objects(tmp_path, live)

    key_b = rotate_key_file(kek)
    rewrapper, seen = _rewrapper(store, kek, batch=3), []
    passes = [rewrapper.run_once() for _ in range(3)]
    for result in passes:
        assert len(result.rewrapped) + len(result.skipped) + len(result.failed) <= 3  # the bound
        seen += result.rewrapped
    assert [len(p.rewrapped) for p in passes] == [3, 1, 0] and [p.remaining for p in passes] == [1, 0, 0]
    assert sorted(seen) == sorted(live) and deleted not in seen
    assert store.count_data_keys() == {("local", key_b): 4}
    for job_id in live:
        row = store.get(job_id)
        assert row.data_key_kek_id == key_b and row.data_key_wrapped != before_rows[job_id].data_key_wrapped
    assert _objects(tmp_path, live) == before_objects  # not one object was rewritten
    assert store.get(deleted).data_key_wrapped is None
    events = [e for e in store.audit_trail() if e.action == "data_keys_rewrapped"]
    assert [e.details["rewrapped"] for e in events] == [3, 1]
    assert events[0].details["kek_fingerprint"] == key_fingerprint("local", key_b)
    assert key_b not in json.dumps([e.details for e in events])

    retire_key(kek, key_a)
    fresh = JobKeys(service.settings.encryption, None, provider=LocalKeyProvider(kek))  # no cached key A
    service.job_keys = fresh
    for job_id, body in bodies.items():
        assert _download(service, job_id) == body and body.startswith(b"%PDF-")
    assert fresh.key_for(_row(store.get(queued.id))) is not None
    with pytest.raises(ConfigError, match="not in"):  # the control: a row dumped before is unreadable now
        fresh.key_for(_row(before_rows[live[0]]))


class _DestroyingStore:
    """The store, with a deletion of `victim` landing between the pass's list and its update."""

    def __init__(self, store: Any, victim: str) -> None:
        self.store, self.victim = store, victim

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def rewrap_due(self, *args: Any, **kwargs: Any) -> Any:
        rows = self.store.rewrap_due(*args, **kwargs)
        assert self.victim in [r.job_id for r in rows]
        self.store.cancel(self.victim, actor="test")
        self.store.tombstone(self.victim, actor="dpo", request_id=None, reason="deletion_requested")
        return rows


def _sealed_jobs(store: Any, kek: Path, n: int) -> list[str]:
    """`n` queued jobs whose rows hold a data key wrapped by the key file's current key, as a
    submission stores it."""
    from docfence.core.ids import new_id

    provider, ids = LocalKeyProvider(kek), []
    for _ in range(n):
        job_id = new_id()
        _key, wrapped = provider.generate({"tenant": "t1", "job": job_id})
        job, _ = store.submit(NewJob(tenant="t1", policy=JobPolicy(), job_id=job_id,
                                     data_key_provider="local", data_key_kek_id=wrapped.key_id,
                                     data_key_wrapped=_b64(wrapped)))
        ids.append(str(job.id))
    return ids


def _b64(wrapped: WrappedKey) -> str:
    return base64.b64encode(wrapped.wrapped).decode("ascii")


def _opens(store: Any, kek: Path, job_id: str) -> bool:
    return JobKeys(Settings().encryption, None, provider=LocalKeyProvider(kek)).key_for(
        _row(store.get(job_id))) is not None


def test_a_key_destroyed_between_list_and_update_is_skipped(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    kek = tmp_path / "kek.key"
    ids = _sealed_jobs(store, kek, 3)
    rotate_key_file(kek)
    victim = sorted(ids)[1]
    result = _rewrapper(_DestroyingStore(store, victim), kek, batch=10).run_once()
    assert result.skipped == [victim] and sorted(result.rewrapped) == sorted(set(ids) - {victim})
    assert result.failed == [] and result.remaining == 0
    assert store.get(victim).data_key_wrapped is None  # still destroyed: the pass wrote nothing back
    assert all(_opens(store, kek, j) for j in result.rewrapped)


class _RacedStore(_DestroyingStore):
    """The store, with a whole pass of another rewrapper landing between this pass's list and update."""

    def __init__(self, store: Any, other: Rewrapper) -> None:
        self.store, self.other = store, other

    def rewrap_due(self, *args: Any, **kwargs: Any) -> Any:
        rows = self.store.rewrap_due(*args, **kwargs)
        assert len(self.other.run_once().rewrapped) == len(rows)
        return rows


def test_two_passes_racing_lose_no_key(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    kek = tmp_path / "kek.key"
    ids = _sealed_jobs(store, kek, 3)
    rotate_key_file(kek)
    result = _rewrapper(_RacedStore(store, _rewrapper(store, kek, 10)), kek, batch=10).run_once()
    assert sorted(result.skipped) == sorted(ids) and result.rewrapped == [] and result.remaining == 0
    assert all(_opens(store, kek, j) for j in ids)  # the winner's wrapped key stayed, and opens


def test_a_row_that_does_not_unwrap_fails_alone_and_the_pass_goes_on(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    kek = tmp_path / "kek.key"
    ids = sorted(_sealed_jobs(store, kek, 3))
    other = _b64(LocalKeyProvider(kek).wrap(LocalKeyProvider(kek).generate({"tenant": "t1", "job": "x"})[0],
                                            {"tenant": "t1", "job": "x"}))  # bound to another job
    row = store.get(ids[0])
    assert store.replace_wrapped_key(ids[0], old=row.data_key_wrapped, provider="local",
                                     kek_id=row.data_key_kek_id, wrapped=other)
    rotate_key_file(kek)
    rewrapper = _rewrapper(store, kek, batch=10)
    with caplog.at_level(logging.WARNING, logger="docfence.rewrap"):
        result = rewrapper.run_once()
    assert result.failed == [ids[0]] and sorted(result.rewrapped) == ids[1:] and result.remaining == 1
    assert any(ids[0] in r.getMessage() and "object_integrity" in r.getMessage() for r in caplog.records)
    assert other not in caplog.text


class _Unreachable:
    name = "local"

    def current_key_id(self) -> str:
        raise ConfigError("injected: the key file cannot be read")


def test_a_failing_rewrap_pass_is_logged_and_the_reconciler_goes_on(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    from docfence.observability.metrics import LOOP_ERRORS

    before = LOOP_ERRORS.labels("rewrap")._value.get()
    rewrapper = Rewrapper(store, _Unreachable, RewrapConfig(batch=10, idle_interval_s=60.0),  # type: ignore[arg-type]
                          clock=clock)
    reconciler = Reconciler(store, None, ReconcileConfig(), rewrapper=rewrapper)
    job, _ = store.submit(NewJob(tenant="t1", policy=JobPolicy(deadline_s=10.0)))
    clock.advance(11.0)  # past its deadline: the deadline pass must still run
    with caplog.at_level(logging.WARNING, logger="docfence.rewrap"):
        result = reconciler.run_once()
    assert result.canceled == [job.id] and result.rewrap is None
    assert "rewrap pass failed: config_invalid" in caplog.text
    assert LOOP_ERRORS.labels("rewrap")._value.get() == before + 1
    assert reconciler.run_once().rewrap is None  # not retried before idle_interval_s
    assert LOOP_ERRORS.labels("rewrap")._value.get() == before + 1
    clock.advance(60.0)
    assert reconciler.run_once().rewrap is None and LOOP_ERRORS.labels("rewrap")._value.get() == before + 2


def test_the_reconciler_runs_a_pass_while_work_remains_and_on_a_rotation(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, clock: FakeClock) -> None:
    kek = tmp_path / "kek.key"
    _sealed_jobs(store, kek, 3)
    reconciler = Reconciler(store, None, ReconcileConfig(), rewrapper=_rewrapper(store, kek, 2, clock))
    first = reconciler.run_once().rewrap  # a first pass looks: nothing is under an older key
    assert isinstance(first, RewrapResult) and first.rewrapped == [] and first.remaining == 0
    assert reconciler.run_once().rewrap is None  # idle: no query until the interval or a rotation
    rotate_key_file(kek)
    moved = [reconciler.run_once().rewrap for _ in range(3)]
    assert [len(r.rewrapped) for r in moved if r] == [2, 1] and moved[2] is None
    clock.advance(60.0)
    again = reconciler.run_once().rewrap
    assert again is not None and again.remaining == 0


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite deployment named by the environment; its data folder (and kek.key) is tmp_path."""
    monkeypatch.setenv("DOCFENCE_DATABASE_URL", f"sqlite:///{tmp_path}/docfence.db")
    monkeypatch.setenv("DOCFENCE_STORAGE_URL", f"file://{tmp_path}/objects")
    (tmp_path / "docfence.toml").write_text("")
    monkeypatch.setenv("DOCFENCE_CONFIG", str(tmp_path / "docfence.toml"))
    return tmp_path / "kek.key"


def _status(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["ops", "status", "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out)["data_keys"])


def test_cli_rotate_status_reconcile_retire(cli_env: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(f"sqlite:///{tmp_path}/docfence.db")
    ids = _sealed_jobs(store, cli_env, 3)
    key_a = str(store.get(ids[0]).data_key_kek_id)
    assert _status(capsys) == {"current_kek": key_fingerprint("local", key_a), "to_rewrap": 0, "by_kek": [
        {"provider": "local", "kek_fingerprint": key_fingerprint("local", key_a), "data_keys": 3,
         "current": True}]}
    assert main(["keys", "rotate-kek", "--json"]) == 0
    key_b = json.loads(capsys.readouterr().out)["kek_id"]
    status = _status(capsys)
    assert status["to_rewrap"] == 3 and status["current_kek"] == key_fingerprint("local", key_b)
    assert key_a not in json.dumps(status)  # fingerprints only
    assert main(["keys", "retire-kek", key_fingerprint("local", key_a)]) == 2  # rows still use it
    assert "3 data key(s) are still wrapped" in capsys.readouterr().err
    assert main(["keys", "retire-kek", key_b]) == 2  # the current key is never retired
    assert main(["reconcile", "--once"]) == 0
    assert len(json.loads(capsys.readouterr().out.splitlines()[-1])["rewrap"]["rewrapped"]) == 3
    assert _status(capsys)["to_rewrap"] == 0
    assert main(["keys", "retire-kek", key_fingerprint("local", key_a), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["retired"] is True
    assert main(["ops", "status"]) == 0
    assert "data keys to re-wrap: 0" in capsys.readouterr().out
    assert all(_opens(store, cli_env, j) for j in ids)
    actions = [e.action for e in store.audit_trail()]
    assert "kek_rotated" in actions and "kek_retired" in actions
    store.close()
