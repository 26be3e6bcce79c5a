"""A worker paused past its lease, cut off from PostgreSQL (between statements and inside a
transaction), and given a job it cannot process: judged from outside, both promises hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from docfence.harness import fault_scenarios as scenarios

from .conftest import SOAK, assert_held


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_sigstopped_worker_loses_its_lease_and_goes_on(tmp_path: Path, store: str) -> None:
    assert_held(scenarios.sigstop(tmp_path, store, soak=SOAK))


def test_partition_between_statements_has_one_winner(tmp_path: Path) -> None:
    assert_held(scenarios.partition_outside_transaction(tmp_path, "postgres", soak=SOAK))


def test_partition_inside_a_transaction_ends_the_job_by_its_deadline(tmp_path: Path) -> None:
    assert_held(scenarios.partition_in_transaction(tmp_path, "postgres", soak=SOAK))


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_poison_job_fails_alone_and_no_worker_exits(tmp_path: Path, store: str) -> None:
    assert_held(scenarios.poison_job(tmp_path, store, soak=SOAK))
