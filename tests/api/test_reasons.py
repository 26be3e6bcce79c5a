"""A free-text reason travels with cancel and delete through the API, the Python client and the CLI,
lands in the audit event (`details.note`) and shows in the job's events; `ops pause/resume --reason`
is recorded and `ops status` says who paused, when and why."""

from __future__ import annotations

import io
import json

import httpx
import pytest

from docfence.cli import main
from docfence.client import DocfenceClient
from docfence.client.errors import HttpError
from docfence.service import Principal, SubmitRequest

from .conftest import PDF, ApiEnv

SUBMITTER = Principal("t", "acme", ("submit", "read"))


def _queued(env: ApiEnv) -> str:
    job, _ = env.service.submit(SUBMITTER, io.BytesIO(PDF), SubmitRequest())
    return job.id


def _note(env: ApiEnv, job_id: str, action: str) -> object:
    event = next(e for e in env.store.audit_events(job_id) if e.action == action)
    return event.details.get("note")


def test_cancel_and_delete_reasons_reach_the_audit_events_over_http(any_env: ApiEnv) -> None:
    env = any_env
    key, admin = env.key(), env.key(scopes=("admin", "read"))
    job_id = _queued(env)
    url = f"{env.base_url}/v1/jobs/{job_id}"
    auth = {"Authorization": f"Bearer {key}"}
    answer = httpx.post(f"{url}/cancel", params={"reason": "  wrong recipient  "}, headers=auth)
    assert answer.status_code == 200 and answer.json()["state"] == "canceled", answer.text
    assert _note(env, job_id, "cancel_requested") == "wrong recipient"  # trimmed
    events = httpx.get(f"{url}/events", headers=auth).json()["events"]
    shown = next(e for e in events if e["action"] == "cancel_requested")
    assert shown["details"]["note"] == "wrong recipient" and shown["reason"] == "cancel_requested"
    deleted = httpx.delete(url, params={"request_id": "DSR-7", "reason": "consent withdrawn"},
                           headers={"Authorization": f"Bearer {admin}"})
    assert deleted.status_code == 200, deleted.text
    tomb = next(e for e in env.store.audit_events(job_id) if e.action == "bytes_deletion")
    # the job's data key was destroyed in the tombstone's transaction: the event names its KEK's fingerprint
    assert {k: v for k, v in tomb.details.items() if k != "kek_fingerprint"} == {
        "request_id": "DSR-7", "note": "consent withdrawn", "key_destroyed": True}


def test_a_cancel_without_reason_records_no_note(env: ApiEnv) -> None:
    job_id = _queued(env)
    with env.client() as client:
        assert client.cancel(job_id).state == "canceled"
    event = next(e for e in env.store.audit_events(job_id) if e.action == "cancel_requested")
    assert "note" not in event.details


@pytest.mark.parametrize("reason", ["x" * 201, "two\nlines"])
def test_a_bad_reason_is_refused_naming_the_field_and_cancels_nothing(env: ApiEnv, reason: str) -> None:
    job_id = _queued(env)
    answer = httpx.post(f"{env.base_url}/v1/jobs/{job_id}/cancel", params={"reason": reason},
                        headers={"Authorization": f"Bearer {env.key()}"})
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "reason"
    assert env.store.get(job_id).state.value == "queued"


def test_the_client_sends_cancel_and_delete_reasons(env: ApiEnv) -> None:
    first, second = _queued(env), _queued(env)
    with env.client() as client:
        assert client.cancel(first, reason="duplicate upload").state == "canceled"
    assert _note(env, first, "cancel_requested") == "duplicate upload"
    with DocfenceClient(env.base_url, env.key(scopes=("admin", "read"))) as admin:
        gone = admin.delete(second, request_id="DSR-8", reason="retention request")
        with pytest.raises(HttpError) as refused:
            admin.delete(second, request_id="not an id!")
    assert gone.raw["deleted_at"] is not None and refused.value.status == 422
    assert _note(env, second, "cancel_requested") == "retention request"  # canceled first, same reason
    assert _note(env, second, "bytes_deletion") == "retention request"


@pytest.fixture
def shell(env: ApiEnv, monkeypatch: pytest.MonkeyPatch) -> ApiEnv:
    monkeypatch.setenv("DOCFENCE_DATABASE_URL", env.settings.database_url)
    monkeypatch.setenv("DOCFENCE_STORAGE_URL", env.settings.storage_url)
    monkeypatch.setenv("DOCFENCE_URL", env.base_url)
    monkeypatch.setenv("DOCFENCE_API_KEY", env.key())
    return env


def test_cli_cancel_and_delete_take_a_reason(shell: ApiEnv, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _queued(shell), _queued(shell)
    assert main(["cancel", first, "--reason", "sent twice", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "canceled"
    assert _note(shell, first, "cancel_requested") == "sent twice"
    assert main(["delete", second, "--request-id", "DSR-9", "--reason", "erasure request", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reason"] == "erasure request"
    assert _note(shell, second, "bytes_deletion") == "erasure request"
    assert main(["cancel", _queued(shell), "--reason", "y" * 201]) == 4  # the server refused it
    assert capsys.readouterr().err.strip().startswith("docfence: --reason: ")
    assert main(["delete", second, "--request-id", "DSR-9", "--reason", "a\tb"]) == 2
    assert "--reason" in capsys.readouterr().err


def test_ops_pause_resume_reasons_and_who_paused(shell: ApiEnv, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "pause", "--mode", "raster", "--reason", "raster engine rollback"]) == 0
    capsys.readouterr()
    assert main(["ops", "status"]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("claims paused:"))
    assert line.startswith("claims paused: raster by cli") and "reason: raster engine rollback" in line
    assert main(["ops", "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    (pause,) = status["pauses"]
    assert pause["scope"] == "raster" and pause["reason"] == "raster engine rollback"
    assert pause["actor"].startswith("cli") and pause["paused_at"]
    assert main(["ops", "resume", "--mode", "raster", "--reason", "fixed in 2.3"]) == 0
    ops = [(e.action, e.reason) for e in shell.store.iter_audit() if e.action.startswith("claims_")]
    assert ops == [("claims_paused", "raster engine rollback"), ("claims_resumed", "fixed in 2.3")]
    capsys.readouterr()
    assert main(["ops", "status"]) == 0
    assert "claims paused: nothing" in capsys.readouterr().out
