"""Job lifecycle through the real HTTP API: submit, wait, download, idempotency, cancel, deadlines."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from docfence.api import jobs
from docfence.client import Conflict, DocfenceClient, JobCanceled, PollTimeout
from docfence.config import DocumentClass
from docfence.core.clock import FakeClock
from docfence.core.states import JobState
from docfence.store.base import Store, open_store
from docfence.testing.procs import long_budget_config

from .conftest import PDF, ApiEnv, api_env

HANG_GUARD_S = 60.0  # the client's timeout: only stops a broken build from hanging


class ClientTime:
    """A client clock that only its own sleeps move, and a hook run at each sleep: the test acts
    while the client backs off, and the client's budget never depends on this machine's speed."""

    def __init__(self, on_sleep: Callable[[], object] = lambda: None) -> None:
        self.now, self.sleeps, self.on_sleep = 0.0, list[float](), on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep()


def _client(env: ApiEnv, time: ClientTime) -> DocfenceClient:
    return DocfenceClient(env.base_url, env.key(), sleep=time.sleep, clock=time.clock)


def _store_at(env: ApiEnv, seconds: float) -> Store:
    """The same database through a store whose clock reads `seconds` past the database's now."""
    clock = FakeClock(env.store.now() + timedelta(seconds=seconds))
    return open_store(env.settings.database_url, clock=clock, migrate=False)


def _objects(env: ApiEnv) -> list[str]:
    return list(env.service.router.for_region("local").list(""))


def test_submit_wait_download_end_to_end(any_env: ApiEnv, tmp_path: Path) -> None:
    output = b"%PDF-1.4 watermarked output\n" * 100
    finished: list[object] = []  # the worker plays its part while the client backs off
    time = ClientTime(lambda: finished or finished.append(any_env.finish(job.id, output, pages=3)))
    with _client(any_env, time) as client:
        job = client.submit(PDF, idempotency_key="e2e-1", watermark={"text": "SHARED"})
        assert job.state == "queued" and job.retry_after_s == 2.0
        done = client.wait(job.id, budget_s=10)
        assert len(time.sleeps) == 1  # one pause: queued, then succeeded
        assert done.state == "succeeded" and done.retry_after_s is None
        assert done.artifact is not None and done.artifact.pages == 3
        assert done.artifact.sha256 == hashlib.sha256(output).hexdigest()
        path = client.download(job.id, tmp_path / "out.pdf")
        assert path.read_bytes() == output
        timeline = client.events(job.id)
    actions = [e["action"] for e in timeline["events"]]
    assert actions == ["submitted", "lease_acquired", "artifact_committed", "download"]
    assert timeline["attempts"][0]["outcome"] == "artifact_committed"
    assert "signed" not in str(timeline["events"][-1]["details"])
    stored = any_env.store.get(job.id)
    assert stored.policy.watermark is not None and stored.policy.watermark.text == "SHARED"


def test_idempotent_retry_returns_same_job_and_keeps_one_input(any_env: ApiEnv) -> None:
    env = any_env
    key = env.key()
    with httpx.Client(base_url=env.base_url, headers={"Authorization": f"Bearer {key}"}) as http:
        first = http.post("/v1/jobs", files={"file": ("a.pdf", PDF)}, headers={"Idempotency-Key": "k-1"})
        again = http.post("/v1/jobs", files={"file": ("a.pdf", PDF)}, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    inputs = [k for k in _objects(env) if k.endswith("input.pdf")]
    assert inputs == [env.store.get(first.json()["id"]).input_key]


def test_same_key_different_request_is_409_and_its_upload_is_removed(any_env: ApiEnv) -> None:
    env = any_env
    with env.client() as client:
        job = client.submit(PDF, idempotency_key="k-2")
        with pytest.raises(Conflict) as caught:
            client.submit(PDF + b"% other bytes\n", idempotency_key="k-2")
        with pytest.raises(Conflict):
            client.submit(PDF, idempotency_key="k-2", mode="raster")
    assert caught.value.status == 409 and caught.value.server_code == "idempotency_conflict"
    assert _objects(env) == [env.store.get(job.id).input_key]


def test_cancel_queued_and_rendering_jobs(any_env: ApiEnv) -> None:
    env = any_env
    with env.client() as client:
        queued = client.submit(PDF)
        assert client.cancel(queued.id).state == "canceled"
        rendering = client.submit(PDF)
        env.claim(rendering.id)
        assert client.get(rendering.id).state == "rendering"
        canceled = client.cancel(rendering.id)
        assert canceled.state == "canceled" and canceled.error_code == "canceled"
        again = client.cancel(rendering.id)  # the caller's wish already holds: the same canceled job
        assert again.state == "canceled" and again.raw["updated_at"] == canceled.raw["updated_at"]
        with pytest.raises(JobCanceled):
            client.wait(rendering.id, budget_s=5)
        finished = client.submit(PDF + b"%done\n")
        env.finish(finished.id)
        with pytest.raises(Conflict) as caught:
            client.cancel(finished.id)
    assert caught.value.server_code == "job_already_ended"
    assert "already ended as succeeded" in str(caught.value)
    assert env.store.attempts(rendering.id)[0].outcome == "cancel_requested"


def test_deadline_passes_job_ends_canceled_and_wait_returns_at_once(any_env: ApiEnv) -> None:
    env = any_env
    time = ClientTime()
    with _client(env, time) as client:
        job = client.submit(PDF, deadline_s=5)
        later = _store_at(env, 6)  # the reconciler's pass once the deadline has gone by
        try:
            assert [j.id for j in later.cancel_past_deadline()] == [job.id]
        finally:
            later.close()
        before = len(env.seen)
        with pytest.raises(JobCanceled) as caught:
            client.wait(job.id, budget_s=30)
    assert time.sleeps == []  # at once: one read, no pause
    assert [(s.method, s.path) for s in env.seen[before:]] == [("GET", f"/v1/jobs/{job.id}")]
    assert caught.value.job is not None and caught.value.job.error_code == "deadline_exceeded"


def test_long_poll_is_bounded_by_its_wait_and_by_the_server_cap(
    env: ApiEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    # That a long poll answers as soon as the job ends is tests/api/test_wait_wakeups.py's case.
    with env.client() as client:
        job = client.submit(PDF)
        assert client.get(job.id, wait_s=0.3, timeout_s=HANG_GUARD_S).state == "queued"
        monkeypatch.setattr(jobs, "MAX_WAIT_S", 0.3)
        assert client.get(job.id, wait_s=3600, timeout_s=HANG_GUARD_S).state == "queued"


def test_wait_times_out_with_job_id_and_the_job_goes_on(env: ApiEnv) -> None:
    with env.client() as client:
        job = client.submit(PDF)
        with pytest.raises(PollTimeout) as caught:
            client.wait(job.id, budget_s=0.6)
    assert caught.value.job_id == job.id and caught.value.code == "poll_timeout"
    assert env.store.get(job.id).state is JobState.QUEUED


def test_upload_over_limit_is_413_and_nothing_is_stored(tmp_path: Path) -> None:
    with api_env(tmp_path, max_upload_bytes=1000) as env, env.client() as client:
        key = env.key()
        headers = {"Authorization": f"Bearer {key}"}
        small_over = httpx.post(f"{env.base_url}/v1/jobs", headers=headers,
                                files={"file": ("a.pdf", b"%PDF-" + b"%" * 996)})
        huge = httpx.post(f"{env.base_url}/v1/jobs", headers=headers,
                          files={"file": ("a.pdf", b"%PDF-" + b"%" * (200 * 1024))})
        ok = client.submit(b"%PDF-" + b"%" * 995)
        for response in (small_over, huge):
            assert response.status_code == 413
            assert response.json()["error"]["code"] == "upload_too_large"
        assert _objects(env) == [env.store.get(ok.id).input_key]
        assert len(env.store.list_jobs()) == 1


def test_validation_errors_share_the_one_error_shape(env: ApiEnv) -> None:
    headers = {"Authorization": f"Bearer {env.key()}"}
    with httpx.Client(base_url=env.base_url, headers=headers) as http:
        cases = [
            http.post("/v1/jobs", files={"file": ("a.pdf", PDF)}, data={"deadline_s": "999999"}),
            http.post("/v1/jobs", files={"file": ("a.pdf", PDF)}, data={"deadline_s": "7200"}),
            http.post("/v1/jobs", files={"file": ("a.pdf", PDF)}, data={"mode": "sepia"}),
            http.post("/v1/jobs", files={"file": ("a.pdf", PDF)}, data={"document_class": "secret"}),
            http.post("/v1/jobs", data={"mode": "vector"}),
            http.get("/v1/jobs/x", params={"wait": "-1"}),
        ]
        missing = http.get("/v1/jobs/job_unknown")
        no_route = http.get("/v2/nothing")
    for response in cases:
        assert response.status_code == 422, response.text
        assert set(response.json()) == {"error"} and response.json()["error"]["code"] == "invalid_request"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert no_route.status_code == 404 and set(no_route.json()["error"]) == {"code", "message"}
    assert env.store.list_jobs() == []


def test_class_mode_override_applies_to_new_jobs_only(env: ApiEnv) -> None:
    with env.client() as client:
        before = client.submit(PDF)
        env.store.set_class_mode("default", "raster", actor="operator")
        after = client.submit(PDF)
        explicit = client.submit(PDF, mode="vector")
    assert (before.mode, after.mode, explicit.mode) == ("vector", "raster", "vector")
    assert env.store.get(before.id).mode == "vector"


def test_unapproved_region_is_refused_before_any_byte_is_stored(tmp_path: Path) -> None:
    classes = {"default": DocumentClass("default"), "us": DocumentClass("us", region="us-east-1")}
    with api_env(tmp_path, classes=classes) as env, env.client() as client:
        response = httpx.post(f"{env.base_url}/v1/jobs", headers={"Authorization": f"Bearer {env.key()}"},
                              files={"file": ("a.pdf", PDF)}, data={"document_class": "us"})
        assert client.submit(PDF).document_class == "default"
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "region_not_approved"
        assert len(_objects(env)) == 1


def test_capabilities_openapi_and_health_need_no_key(env: ApiEnv) -> None:
    with httpx.Client(base_url=env.base_url) as http:
        caps = http.get("/v1/capabilities").json()
        spec = http.get("/openapi.json").json()
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").json() == {"status": "ok"}
    assert caps["modes"] == ["vector", "raster"] and caps["document_classes"][0]["name"] == "default"
    for code in ("idempotency_conflict", "not_found", "upload_too_large", "signed_url_expired"):
        assert code in caps["error_codes"]
    assert "over_limits" in caps["error_codes"]
    assert "/v1/jobs/{job_id}/artifact" in spec["paths"]
    assert spec["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"


def test_readyz_reports_an_unavailable_store(env: ApiEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    from docfence.core.errors import StoreUnavailable

    def down() -> None:
        raise StoreUnavailable()

    monkeypatch.setattr(env.store, "now", down)
    response = httpx.get(f"{env.base_url}/readyz")
    assert response.status_code == 503 and response.json() == {"status": "unavailable"}


def _run_worker(env: ApiEnv, tmp_path: Path) -> None:
    """`python -m docfence.cli worker --until-idle` as its own process, with the server's settings and a
    render budget only a hang exceeds (the job must succeed on a loaded machine too)."""
    cmd = [sys.executable, "-m", "docfence.cli", "worker", "--until-idle"]
    child_env = dict(os.environ, DOCFENCE_DATABASE_URL=env.settings.database_url,
                     DOCFENCE_STORAGE_URL=env.settings.storage_url, **long_budget_config(tmp_path))
    done = subprocess.run(cmd, env=child_env, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_real_worker_watermarks_end_to_end(any_env: ApiEnv, tmp_path: Path) -> None:
    from docfence.samples import pdfs

    source = pdfs.mixed_sizes()
    with any_env.client() as client:
        job = client.submit(source, idempotency_key="real-1", watermark={"text": "EXTERNAL COPY"})
        _run_worker(any_env, tmp_path)  # --until-idle: renders the queued job, then exits
        done = client.wait(job.id, budget_s=60)
        path = client.download(job.id, tmp_path)
    assert done.artifact is not None and done.artifact.pages == 6
    data = path.read_bytes()
    assert data.startswith(b"%PDF") and data != source
    assert hashlib.sha256(data).hexdigest() == done.artifact.sha256
    events = any_env.store.audit_events(job.id)
    assert [e.action for e in events][:3] == ["submitted", "lease_acquired", "artifact_committed"]
    assert events[1].actor not in ("test-worker", "") and events[0].actor.startswith("key:")
