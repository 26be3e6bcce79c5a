"""A process killed in the middle of writing an object leaves a hidden `.tmp-*` file in the local
folder; the reconciler removes it once it was last written more than the grace ago (never sooner),
both from its regular pass and on its own."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from docfence.blobs.local import TEMP_PREFIX, LocalBlobStore
from docfence.blobs.regions import RegionRouter
from docfence.core.clock import FakeClock, utcnow
from docfence.maintenance.reconciler import TEMP_MIN_AGE_S, ReconcileConfig, Reconciler
from docfence.storage_keys import staging_key
from docfence.store.base import Store

# Writes the first chunk of an object, says so, then blocks until it is killed.
_KILLED_WRITER = """
import sys
from docfence.blobs.local import LocalBlobStore

def chunks():
    yield b"%PDF-1.7 the first chunk of an upload"
    print("writing", flush=True)
    sys.stdin.read()

class Stream:
    def __init__(self):
        self.parts = chunks()
    def read(self, n=-1):
        return next(self.parts, b"")

LocalBlobStore(sys.argv[1]).put_stream(sys.argv[2], Stream(), max_bytes=1 << 20)
"""


def _killed_mid_write(root: Path, key: str) -> Path:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(root), key], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)  # a hang guard only
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
    assert proc.returncode == -signal.SIGKILL
    (debris,) = [p for p in root.rglob(f"{TEMP_PREFIX}*")]
    return debris


def _temp_files(root: Path) -> list[Path]:
    return list(root.rglob(f"{TEMP_PREFIX}*"))


def test_a_killed_writers_temp_file_is_removed_after_the_grace(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "objects"
    files = FakeClock(start=utcnow())  # the blob folder compares file times against this clock
    blobs = LocalBlobStore(root, clock=files)
    debris = _killed_mid_write(root, staging_key("t1", "job_killed", 1))
    assert list(blobs.list("jobs")) == []  # invisible as an object: only this collection finds it
    grace = TEMP_MIN_AGE_S + 60
    gc = Reconciler(store, RegionRouter({"local": blobs}), ReconcileConfig(staging_grace_s=grace))

    assert gc.collect_temp_debris() == 0
    files.advance(grace - 1)
    assert gc.collect_temp_debris() == 0 and debris.exists()  # a slow writer may still be at it
    files.advance(2)
    assert gc.collect_temp_debris() == 1
    assert _temp_files(root) == []


def test_the_regular_pass_removes_temp_debris_on_its_own_interval(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "objects"
    files = FakeClock(start=utcnow())
    blobs = LocalBlobStore(root, clock=files)
    _killed_mid_write(root, staging_key("t1", "job_a", 1))
    files.advance(TEMP_MIN_AGE_S + 1)  # a zero staging grace still waits the minimum age
    gc = Reconciler(store, RegionRouter({"local": blobs, "eu": blobs}),
                    ReconcileConfig(staging_grace_s=0, temp_interval_s=3600))
    result = gc.run_once()
    assert result.temp_deleted == 1 and _temp_files(root) == []
    _killed_mid_write(root, staging_key("t1", "job_b", 1))
    files.advance(TEMP_MIN_AGE_S + 1)
    assert gc.run_once().temp_deleted == 0  # the folder walk waits for temp_interval_s
    assert len(_temp_files(root)) == 1
