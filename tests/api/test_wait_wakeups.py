"""`GET /v1/jobs/{id}?wait=` answers when the commit that ends the job is announced, over real HTTP
on loopback and both stores. The safety poll and the cap are set to an hour, so only the wake-up can
answer in time; HANG_GUARD_S (the client's timeout) only stops a broken build from hanging."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from docfence.api import jobs
from docfence.client import DocfenceClient
from docfence.client.errors import JobNotFound

from .conftest import PDF, ApiEnv

HANG_GUARD_S = 60.0


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # surfaced by the test's assertions
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _reads_signalled(env: ApiEnv, monkeypatch: pytest.MonkeyPatch) -> threading.Semaphore:
    """Count the handler's reads of the job: one release per `Service.get`."""
    reads = threading.Semaphore(0)
    original = env.service.get

    def get(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            reads.release()

    monkeypatch.setattr(env.service, "get", get)
    return reads


def test_wait_answers_when_the_ending_commit_is_announced(
    any_env: ApiEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "SAFETY_POLL_S", 3600.0)
    monkeypatch.setattr(jobs, "MAX_WAIT_S", 3600.0)
    with any_env.client() as client:
        job = client.submit(PDF)
        reads = _reads_signalled(any_env, monkeypatch)
        thread, out = _in_thread(lambda: client.get(job.id, wait_s=3600, timeout_s=HANG_GUARD_S))
        assert reads.acquire(timeout=HANG_GUARD_S)  # the handler read the job (its watch was already on)
        any_env.finish(job.id)  # claim and fenced commit, as a worker does
        thread.join(HANG_GUARD_S)
    assert "error" not in out, out.get("error")
    assert out["value"].state == "succeeded" and out["value"].artifact is not None
    assert any_env.store.wakeup_listener().fanout.watched_jobs() == set()


def test_wait_on_a_job_of_another_tenant_is_not_found_and_leaves_no_watch(any_env: ApiEnv) -> None:
    with any_env.client() as owner:
        job = owner.submit(PDF)
    stranger = DocfenceClient(any_env.base_url, any_env.key(tenant="other"))
    with stranger, pytest.raises(JobNotFound):
        stranger.get(job.id, wait_s=5, timeout_s=HANG_GUARD_S)
    assert any_env.store.wakeup_listener().fanout.watched_jobs() == set()
