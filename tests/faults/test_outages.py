"""Lost answers and outages judged from outside: a submission whose COMMIT answer is lost, the object
store unavailable for 10 s (a read-only folder, a stopped S3 server), a PostgreSQL restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from docfence.harness import fault_outages as outages
from docfence.harness import fault_scenarios as scenarios

from .conftest import SOAK, assert_held


def test_lost_commit_answer_keeps_the_input(tmp_path: Path) -> None:
    assert_held(scenarios.lost_answer(tmp_path, "postgres", soak=SOAK))


# the bounded run: each store once, each kind of object store once; the soak adds the other pairs
OUTAGE_CASES = [("sqlite", "local"), ("postgres", "s3")]
if SOAK:
    OUTAGE_CASES += [("postgres", "local"), ("sqlite", "s3")]


@pytest.mark.parametrize(("store", "blobs"), OUTAGE_CASES)
def test_storage_outage_fails_no_job_with_time_left(tmp_path: Path, store: str, blobs: str) -> None:
    assert_held(outages.storage_outage(tmp_path, store, blobs=blobs, soak=SOAK))


@pytest.mark.pg_restart
def test_postgres_restart_during_a_run(tmp_path: Path) -> None:
    assert_held(outages.pg_restart(tmp_path, "postgres", soak=SOAK))
