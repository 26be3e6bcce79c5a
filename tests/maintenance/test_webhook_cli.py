"""`docfence webhooks ...` in-process against a SQLite store named by the environment: the secret is
printed once, lists never show it, errors are one line naming the field, `deliver --once` delivers and
`show` lists the attempts; the payload carries only the documented fields."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from docfence.cli import main
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, NewJob
from docfence.maintenance.webhooks import DELIVERIES
from docfence.store import open_store
from docfence.testing.webhook_receiver import Receiver, receiving

PAYLOAD_FIELDS = {"job_id", "tenant", "state", "attempt", "kind", "document_class", "mode", "error_code",
                  "reason", "report_request_id", "links", "sha256", "pages", "bytes"}


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path}/docfence.db"
    config = tmp_path / "docfence.toml"
    config.write_text('[webhooks]\nallow_hosts = ["127.0.0.1"]\n')
    monkeypatch.setenv("DOCFENCE_DATABASE_URL", url)
    monkeypatch.setenv("DOCFENCE_STORAGE_URL", f"file://{tmp_path}/objects")
    monkeypatch.setenv("DOCFENCE_CONFIG", str(config))
    return url


def test_create_list_rotate_disable(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhooks", "create", "--tenant", "acme", "--url", "https://hooks.example.org/x",
                 "--events", "job.failed"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    secret, endpoint_id = lines[-1], lines[0].split()[1]
    assert secret.startswith("whsec_") and "not shown again" in lines[1]
    assert main(["webhooks", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["id"] == endpoint_id and listed["events"] == ["job.failed"] and "secret" not in listed
    assert main(["webhooks", "rotate-secret", endpoint_id, "--tenant", "acme", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["secret"] not in (secret, None)
    assert main(["webhooks", "disable", endpoint_id, "--tenant", "other"]) != 0  # not that tenant's
    assert "no webhook endpoint" in capsys.readouterr().err
    assert main(["webhooks", "disable", endpoint_id, "--tenant", "acme"]) == 0
    assert "whsec_" not in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (["--url", "http://192.168.0.10/x"], "non-public address"),
    (["--url", "https://x.example/", "--events", "job.started"], "events must be"),
    (["--url", "gopher://x.example/"], "http:// or https://"),
])
def test_refusals_are_one_line(db: str, capsys: pytest.CaptureFixture[str], args: list[str],
                               words: str) -> None:
    assert main(["webhooks", "create", "--tenant", "acme", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_deliver_once_and_show(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    receiver = Receiver(secret="")
    before = DELIVERIES.labels("delivered")._value.get()
    with receiving(receiver) as url:
        assert main(["webhooks", "create", "--tenant", "acme", "--url", url]) == 0
        receiver.secret = capsys.readouterr().out.strip().splitlines()[-1]
        store = open_store(db)
        job, _ = store.submit(NewJob(tenant="acme", policy=JobPolicy(), report_request_id="rr_9"))
        (claim,) = store.claim("w1")
        store.complete(job.id, claim.attempt, "w1", ArtifactInfo("k", "ab" * 32, 10, 4, {"ok": True}))
        assert main(["webhooks", "deliver", "--once", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["delivered"] == 2  # job.* and report_request.*
    assert DELIVERIES.labels("delivered")._value.get() == before + 2
    for payload in receiver.payloads.values():
        assert set(payload) == {"type", "timestamp", "data"} and set(payload["data"]) == PAYLOAD_FIELDS
    assert main(["webhooks", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"pending": 0, "delivering": 0, "delivered": 2, "failed": 0}
    assert main(["webhooks", "show", job.id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {d["state"] for d in shown["deliveries"]} == {"delivered"} and len(shown["attempts"]) == 2
    assert main(["inspect", job.id]) == 0  # the attempts are on the job's timeline
    assert capsys.readouterr().out.count("webhook_attempt") == 2


def test_a_tenant_has_a_bounded_number_of_enabled_endpoints(db: str) -> None:
    from docfence.config import WebhooksConfig
    from docfence.core.errors import InvalidRequest
    from docfence.maintenance.webhook_endpoints import MAX_ENDPOINTS_PER_TENANT, WebhookEndpoints

    endpoints = WebhookEndpoints(open_store(db), WebhooksConfig())
    made = [endpoints.create("acme", f"https://hooks.example.org/{i}", ["*"], actor="t")
            for i in range(MAX_ENDPOINTS_PER_TENANT)]
    with pytest.raises(InvalidRequest):
        endpoints.create("acme", "https://hooks.example.org/more", ["*"], actor="t")
    endpoints.create("globex", "https://hooks.example.org/other-tenant", ["*"], actor="t")
    endpoints.disable("acme", made[0].endpoint.id, actor="t")
    endpoints.create("acme", "https://hooks.example.org/replacement", ["*"], actor="t")


def test_prune_deletes_finished_events_after_keep_events_s(db: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docfence.toml").write_text('[webhooks]\nallow_hosts = ["127.0.0.1"]\nkeep_events_s = 3600\n')
    store = open_store(db)
    store.insert_webhook_endpoint("whe_1", tenant="acme", url="http://127.0.0.1:9/x", events=("job.failed",),
                                  secret="whsec_c2VjcmV0c2VjcmV0c2VjcmV0", description=None, actor="op")
    job, _ = store.submit(NewJob(tenant="acme", policy=JobPolicy()))
    store.claim("w1")
    store.fail(job.id, 1, "w1", "pdf_malformed", "broken", retryable=False)
    with sqlite3.connect(db.removeprefix("sqlite:///")) as conn:  # failed, and two hours old
        conn.execute("UPDATE webhook_deliveries SET state = 'failed', finished_at = created_at")
        conn.execute("UPDATE webhook_events SET created_at = created_at - 7200")
    assert main(["webhooks", "prune", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"pruned": 1}
    assert store.webhook_activity(job.id).events == {}
    assert main(["webhooks", "prune"]) == 0
    assert capsys.readouterr().out.strip() == "pruned=0"


def test_the_reconcile_process_delivers_webhooks(db: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`docfence reconcile`, a real process: beside its passes it delivers webhooks, as a worker's
    in-process reconciler does."""
    import os
    import subprocess
    import sys

    from docfence.testing.barriers import HANG_GUARD_S
    from docfence.testing.procs import wait_for

    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        assert main(["webhooks", "create", "--tenant", "acme", "--url", url, "--events", "job.failed"]) == 0
        receiver.secret = capsys.readouterr().out.strip().splitlines()[-1]
        store = open_store(db)
        job, _ = store.submit(NewJob(tenant="acme", policy=JobPolicy()))
        store.claim("w1")
        store.fail(job.id, 1, "w1", "pdf_malformed", "broken", retryable=False)
        with (tmp_path / "reconcile.log").open("wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "docfence.cli", "reconcile"],
                                    env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: receiver.payloads, HANG_GUARD_S, "the reconcile process to deliver")
        finally:
            proc.terminate()
            proc.wait(HANG_GUARD_S)
    (payload,) = receiver.payloads.values()
    assert payload["type"] == "job.failed" and payload["data"]["job_id"] == job.id
