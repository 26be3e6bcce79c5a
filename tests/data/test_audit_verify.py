"""`docfence audit verify` passes on an untouched trail and fails, naming the first bad event, after an
event is edited, deleted or reordered directly in the database (both stores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, NewJob
from docfence.testing.procs import worker_env


def cli(store, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    url = store.url if store.dialect == "postgres" else f"sqlite:///{store.path}"
    env = worker_env(url, f"file://{tmp_path}")
    return subprocess.run([sys.executable, "-m", "docfence.cli", "audit", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def populate(store) -> str:  # type: ignore[no-untyped-def]
    job, _ = store.submit(NewJob(tenant="t", policy=JobPolicy()))
    store.claim("w")
    store.complete(job.id, 1, "w", ArtifactInfo("k", "0" * 64, 1, 1))
    store.record_event("download", actor="key:1", job_id=job.id)
    store.pause_claims("raster", actor="op")
    return str(job.id)


def sql(store, statement: str) -> None:  # type: ignore[no-untyped-def]
    if store.dialect == "sqlite":
        conn = store._conn()
        conn.execute(statement)
    else:
        store._conn().execute(statement)


def seq_of(store, job_id: str, chain_seq: int) -> int:  # type: ignore[no-untyped-def]
    return next(e.seq for e in store.audit_events(job_id) if e.chain_seq == chain_seq)


def test_untouched_trail_verifies_and_exports(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job_id = populate(store)
    ok = cli(store, tmp_path, "verify")
    assert ok.returncode == 0, ok.stderr
    assert "intact" in ok.stdout
    out = tmp_path / "trail.jsonl"
    assert cli(store, tmp_path, "export", "--out", str(out)).returncode == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["action"] for r in rows if r["job_id"] == job_id] == [
        "submitted", "lease_acquired", "artifact_committed", "download"]
    assert all(r["hash"] and "prev_hash" in r for r in rows)


@pytest.mark.parametrize("tamper", ["edit", "delete", "delete_last", "reorder"])
def test_tampering_is_detected(store, tmp_path: Path, tamper: str) -> None:  # type: ignore[no-untyped-def]
    job_id = populate(store)
    second, third = seq_of(store, job_id, 2), seq_of(store, job_id, 3)
    if tamper == "edit":
        sql(store, f"UPDATE audit_events SET actor = 'someone-else' WHERE seq = {second}")
    elif tamper == "delete":
        sql(store, f"DELETE FROM audit_events WHERE seq = {second}")
    elif tamper == "delete_last":
        sql(store, f"DELETE FROM audit_events WHERE seq = {seq_of(store, job_id, 4)}")
    else:  # swap two events' places in the order
        sql(store, f"UPDATE audit_events SET seq = -1 WHERE seq = {second}")
        sql(store, f"UPDATE audit_events SET seq = {second} WHERE seq = {third}")
        sql(store, f"UPDATE audit_events SET seq = {third} WHERE seq = -1")
    bad = cli(store, tmp_path, "verify")
    assert bad.returncode == 1, bad.stdout
    assert "BROKEN" in bad.stderr
    if tamper != "delete_last":
        expected = third if tamper == "delete" else second
        assert f"event {expected}" in bad.stderr, bad.stderr
    else:
        assert job_id in bad.stderr
