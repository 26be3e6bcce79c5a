"""A worker's job folders: private, named after its process, removed when it stops; the folders of a
worker killed on this host (SIGKILL, OOM killer) are removed by the next worker that starts, since they
may hold a copy of a document."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docfence.blobs.regions import RegionRouter
from docfence.config import Settings, WorkerConfig
from docfence.sandbox.scratch import LOCK_NAME
from docfence.worker.runner import SCRATCH_PREFIX, Worker


def test_a_starting_worker_removes_a_killed_workers_folders_and_its_own_when_it_stops(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()  # its pid now names no process
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    left = scratch / f"{SCRATCH_PREFIX}{killed.pid}-abcd1234" / "01JOB-1"
    left.mkdir(parents=True)
    (left / "input.pdf").write_bytes(b"%PDF- a copy of someone's document")
    (left.parent / LOCK_NAME).touch()  # its lock, released when the worker was killed

    settings = Settings(storage_url=f"file://{tmp_path / 'objects'}",
                        worker=WorkerConfig(reconcile_in_process=False))
    worker = Worker(settings, store, RegionRouter.from_config(settings.region_urls()))
    own = [p.name for p in scratch.iterdir()]
    assert len(own) == 1 and own[0].startswith(f"{SCRATCH_PREFIX}{os.getpid()}-")

    worker.run(until_idle=True)
    assert list(scratch.iterdir()) == []
