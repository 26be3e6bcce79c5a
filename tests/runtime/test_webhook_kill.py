"""A dispatcher process SIGKILLed mid-delivery (the receiver has the request, nothing is recorded yet):
its lease runs out, another dispatcher delivers it again under the next attempt number, so no
(webhook-id, attempt) pair reaches the receiver twice and every event is delivered. Both stores."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from docfence.config import WebhooksConfig
from docfence.core.clock import FakeClock, utcnow
from docfence.core.policy import JobPolicy
from docfence.core.records import ArtifactInfo, NewJob
from docfence.maintenance.webhook_endpoints import WebhookEndpoints
from docfence.maintenance.webhooks import WebhookDispatcher
from docfence.testing.webhook_receiver import Receiver, receiving

LEASE_S = 60.0
CONFIG = WebhooksConfig(allow_hosts=("127.0.0.1",), lease_s=LEASE_S, connect_timeout_s=2.0,
                        read_timeout_s=5.0)


def _db_url(store) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite:///{store.path}" if store.dialect == "sqlite" else str(store.url)


def test_sigkill_mid_delivery_then_another_dispatcher_delivers_it(store, clock: FakeClock,  # type: ignore[no-untyped-def]
                                                                  tmp_path: Path) -> None:
    clock.advance((utcnow() - clock.now()).total_seconds())  # the killed process runs on the real clock
    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        issued = WebhookEndpoints(store, CONFIG).create("t1", url, ["job.succeeded"], actor="op")
        receiver.secret = issued.secret
        for _ in range(3):
            store.submit(NewJob(tenant="t1", policy=JobPolicy()))
        for claim in store.claim("w1", limit=3):
            store.complete(claim.job.id, claim.attempt, "w1",
                           ArtifactInfo(f"k/{claim.job.id}", "ef" * 32, 10, 1, {"ok": True}))
        config_file = tmp_path / "docfence.toml"
        config_file.write_text(f'[webhooks]\nallow_hosts = ["127.0.0.1"]\nlease_s = {LEASE_S}\n')
        env = {"DOCFENCE_DATABASE_URL": _db_url(store), "DOCFENCE_CONFIG": str(config_file),
               "DOCFENCE_FAULTS": "webhook_sent=kill", "PATH": "/usr/bin:/bin"}
        doomed = subprocess.run([sys.executable, "-m", "docfence.cli", "webhooks", "deliver", "--once"],
                                env=env, capture_output=True, timeout=120)
        assert doomed.returncode == -signal.SIGKILL, doomed.stderr.decode()[-2000:]
        assert len(receiver.received) == 1  # the receiver has it; the dispatcher died before recording
        (killed_id, _), = receiver.received
        rescuer = WebhookDispatcher(store, CONFIG, worker="d2")
        assert len(rescuer.run_once().delivered) == 2  # the other two; the killed one is still leased
        # ...until its lease runs out: the killed process leased it on the real clock, for LEASE_S
        clock.advance((utcnow() - clock.now()).total_seconds() + LEASE_S + 1)
        assert len(rescuer.run_once().delivered) == 1
    assert receiver.bad_signatures == 0
    assert len(receiver.received) == len(set(receiver.received))  # never twice for one attempt number
    assert len(receiver.payloads) == 3  # every event delivered (the receiver dedupes on webhook-id)
    assert sorted(n for i, n in receiver.received if i == killed_id) == [1, 2]
    job_id = receiver.payloads[killed_id]["data"]["job_id"]
    attempts = store.webhook_activity(job_id).attempts
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "abandoned"), (2, "delivered")]
    assert all(d.state == "delivered" for d in store.webhook_activity(job_id).deliveries)
