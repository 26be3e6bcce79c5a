"""`inspect`: the "why is this job still in progress?" answer, by the store's clock, on both stores."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from docfence.cli import inspect as inspect_cli
from docfence.core.clock import FakeClock
from docfence.core.errors import NotFound
from docfence.observability.inspect import format_inspection, inspect_job, inspection_dict
from docfence.store.base import Store, open_store

from .helpers import submit


def test_expired_lease_says_the_reconciler_will_requeue_it(store: Store, clock: FakeClock) -> None:
    job = submit(store, max_attempts=5, lease_ttl_s=30.0, deadline_s=600.0)
    store.claim("worker-a")
    clock.advance(20)
    store.heartbeat(job.id, 1, "worker-a")  # last heartbeat at t=20: lease until t=50
    clock.advance(42)  # t=62: expired 12 s ago
    ins = inspect_job(store, job.id)
    text = format_inspection(ins)
    assert "state      rendering   attempt 1/5" in text
    assert ("lease expired 12 s ago (held by worker-a; last heartbeat 42 s ago); the reconciler will "
            "requeue it on its next pass, attempt 2 of 5") in text
    assert "deadline in 8 min 58 s: it will be canceled then if still not done" in text
    assert "policy     mode vector, dpi 150, class default, region local" in text
    assert "lease_acquired" in text and "worker-a" in text


def test_expired_lease_on_the_last_attempt_says_it_will_fail(store: Store, clock: FakeClock) -> None:
    job = submit(store, max_attempts=1, lease_ttl_s=5.0)
    store.claim("w")
    clock.advance(7)
    steps = inspect_job(store, job.id).next_steps
    assert "the reconciler will fail it on its next pass: attempts exhausted (1 of 1)" in steps[0]


def test_valid_lease_and_queue_position_and_pause(store: Store, clock: FakeClock) -> None:
    rendering = submit(store, lease_ttl_s=30.0)
    store.claim("w1")
    queued = [submit(store) for _ in range(3)]
    store.pause_claims("vector", actor="test", reason="rollback")
    clock.advance(10)
    steps = inspect_job(store, rendering.id).next_steps
    assert steps[0] == "attempt 1 of 3 is rendering on w1; lease valid for 20 s; last heartbeat 10 s ago"
    last = inspect_job(store, queued[-1].id)
    assert last.queued_ahead == 2
    assert "queued behind 2 job(s); the next claim makes attempt 1 of 3" in last.next_steps
    assert any(s.startswith("claims paused for vector") for s in last.next_steps)
    assert "deadline in 9 min 50 s: it will be canceled then if still not done" in last.next_steps


def test_past_deadline_and_idle_fleet(store: Store, clock: FakeClock) -> None:
    job = submit(store, deadline_s=30.0)
    clock.advance(45)
    steps = inspect_job(store, job.id).next_steps
    assert "no worker holds any lease and this job is next: check that workers are running" in steps
    assert steps[-1].startswith("deadline passed 15 s ago: the reconciler will cancel it on its next pass")


def test_terminal_job_and_console_view_carry_no_storage_keys(store: Store, clock: FakeClock) -> None:
    job = submit(store)
    store.cancel(job.id, actor="key:k")
    ins = inspect_job(store, job.id)
    assert ins.next_steps == ["terminal: canceled (canceled); nothing further will happen to this job"]
    view = inspection_dict(ins)
    assert view["job"]["state"] == "canceled" and [e["action"] for e in view["timeline"]] == [
        "submitted", "cancel_requested"]
    assert "input_key" not in repr(view) and "idempotency" not in repr(view)
    with pytest.raises(NotFound):
        inspect_job(store, "nope")


def test_cli_prints_the_one_screen_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/d.db"
    monkeypatch.setenv("DOCFENCE_DATABASE_URL", url)
    monkeypatch.setenv("DOCFENCE_STORAGE_URL", f"file://{tmp_path}/objects")
    store = open_store(url)
    job = submit(store)
    store.close()
    parser = argparse.ArgumentParser()
    inspect_cli.register(parser.add_subparsers())
    args = parser.parse_args(["inspect", job.id])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert f"job {job.id}" in out and "queued behind 0 job(s)" in out
    args = parser.parse_args(["inspect", "missing"])
    assert args.func(args) == 1
