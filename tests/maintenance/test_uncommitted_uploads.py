"""An API process killed after storing a submission's input and sealed password but before its job row
commits leaves bytes no job names: the reconciler removes them once written longer ago than the grace
(by the blob store's own modification time), and never touches the bytes of a committed job."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from docfence.blobs.regions import RegionRouter
from docfence.blobs.sealed import password_key
from docfence.config import Settings
from docfence.core.clock import FakeClock, utcnow
from docfence.core.errors import NotFound
from docfence.maintenance.reconciler import ReconcileConfig, Reconciler
from docfence.maintenance.staging import UNCOMMITTED_MIN_AGE_S
from docfence.service import Principal, Service, SubmitRequest
from docfence.storage_keys import input_key
from docfence.store.base import Store

PDF = b"%PDF-1.7 synthetic upload"
PASSWORD_KEY = Fernet.generate_key().decode()

# Submits one document with a password; DOCFENCE_FAULTS kills it before the job row commits.
_SUBMITTER = """
import io, sys
from docfence.blobs.regions import RegionRouter
from docfence.config import Settings
from docfence.service import Principal, Service, SubmitRequest
from docfence.store.base import open_store

settings = Settings(database_url=sys.argv[1], storage_url=sys.argv[2], password_key=sys.argv[3])
store = open_store(settings.database_url)
service = Service(settings, store, RegionRouter.from_config(settings.region_urls()), signing_secret=b"s" * 32)
service.submit(Principal("k1", "t1", ("admin",)), io.BytesIO(sys.argv[4].encode()),
               SubmitRequest(password="open sesame"))
print("committed", flush=True)
"""


@pytest.fixture
def clock() -> FakeClock:
    """The store's clock starts at the real time, so it can be compared with the files' write times."""
    return FakeClock(start=utcnow())


def _database_url(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store_kind == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


def _killed_before_commit(database_url: str, storage_url: str) -> None:
    env = {**os.environ, "DOCFENCE_FAULTS": "after_input_upload=kill"}
    proc = subprocess.run([sys.executable, "-c", _SUBMITTER, database_url, storage_url, PASSWORD_KEY,
                           PDF.decode()], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "committed" not in proc.stdout


def test_an_upload_whose_job_never_committed_is_collected_after_the_grace(
    store: Store, store_kind: str, clock: FakeClock, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings = Settings(storage_url=f"file://{tmp_path / 'objects'}", password_key=PASSWORD_KEY)
    router = RegionRouter.from_config(settings.region_urls())
    blobs = router.for_region("local")
    service = Service(settings, store, router, signing_secret=b"s" * 32)
    kept, _ = service.submit(Principal("k1", "t1", ("admin",)), io.BytesIO(PDF),
                             SubmitRequest(password="kept"))

    _killed_before_commit(_database_url(store_kind, tmp_path, request), settings.storage_url)
    left = sorted(set(blobs.list("jobs")) - set(blobs.list(f"jobs/t1/{kept.id}")))
    (job_id,) = {key.split("/")[2] for key in left}
    with pytest.raises(NotFound):
        store.get(job_id)  # the killed submission's row never committed
    assert left == sorted([input_key("t1", job_id), password_key(f"jobs/t1/{job_id}/")])
    committed = sorted(blobs.list(f"jobs/t1/{kept.id}"))
    assert committed == sorted([kept.input_key, password_key(f"jobs/t1/{kept.id}/")])

    grace = 2 * UNCOMMITTED_MIN_AGE_S  # a grace longer than the floor is what counts
    written = max(t for t in map(blobs.modified_at, left) if t is not None)

    def reconcile_at(age_s: float) -> list[str]:
        clock.advance((written + timedelta(seconds=age_s) - store.now()).total_seconds())
        return Reconciler(store, router, ReconcileConfig(staging_grace_s=grace)).run_once().staging_deleted

    assert reconcile_at(grace - 1) == []  # its submission might still be about to commit
    assert sorted(blobs.list("jobs")) == sorted(left + committed)
    assert sorted(reconcile_at(grace + 1)) == left
    assert sorted(blobs.list("jobs")) == committed  # a committed job's input and password are kept
    assert sorted(reconcile_at(10 * grace)) == [] and sorted(blobs.list("jobs")) == committed


def test_a_short_grace_still_waits_the_floor_for_uploads_without_a_job(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    """A batch stores every upload before its one commit, so a zero grace must not race it."""
    router = RegionRouter.from_config(Settings(storage_url=f"file://{tmp_path / 'objects'}").region_urls())
    blobs = router.for_region("local")
    key = input_key("t1", "01NOJOBROW0000000000000000")
    blobs.put(key, PDF)
    written = blobs.modified_at(key)
    assert written is not None
    clock.advance((written + timedelta(seconds=UNCOMMITTED_MIN_AGE_S - 1) - store.now()).total_seconds())
    gc = Reconciler(store, router, ReconcileConfig(staging_grace_s=0))
    assert gc.sweep_orphans() == [] and blobs.exists(key)
    clock.advance(2)
    assert gc.sweep_orphans() == [key]
