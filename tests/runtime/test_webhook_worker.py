"""End to end through a real `docfence worker` process: a submitted PDF is rendered, and the worker's
own webhook dispatcher (beside its in-process reconciler) delivers the signed `job.succeeded` event to a
real loopback receiver."""

from __future__ import annotations

import io
from pathlib import Path

from docfence.config import load_settings
from docfence.maintenance.webhook_endpoints import WebhookEndpoints
from docfence.samples.pdfs import links
from docfence.service import Principal, Service, SubmitRequest
from docfence.testing.procs import LONG_BUDGET_TOML, start_worker, stop, worker_env
from docfence.testing.webhook_receiver import Receiver, receiving
from docfence.wiring import Runtime

HANG_GUARD_S = 300.0  # a starved machine renders slowly; never what is asserted
SUBMITTER = Principal("k1", "t1", ("submit",))


def test_a_worker_delivers_the_webhook_of_the_job_it_finished(tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    config = tmp_path / "docfence.toml"
    config.write_text(LONG_BUDGET_TOML + '[webhooks]\nallow_hosts = ["127.0.0.1"]\n')
    env = worker_env(f"sqlite:///{tmp_path / 'db.sqlite'}", f"file://{tmp_path / 'o'}",
                     DOCFENCE_LEASE_TTL_S="120", DOCFENCE_CONFIG=str(config))
    rt = Runtime.open(load_settings(env=env))
    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        issued = WebhookEndpoints(rt.store, rt.settings.webhooks).create("t1", url, ["*"], actor="test")
        receiver.secret = issued.secret
        service = Service(rt.settings, rt.store, rt.regions, signing_secret=b"o" * 32)
        job, _ = service.submit(SUBMITTER, io.BytesIO(links()), SubmitRequest())
        worker = start_worker(env, tmp_path / "worker.log")
        try:
            assert receiver.arrived.wait(HANG_GUARD_S), (tmp_path / "worker.log").read_text()[-3000:]
        finally:
            stop(worker)
    (payload,) = receiver.payloads.values()
    assert payload["type"] == "job.succeeded" and payload["data"]["job_id"] == job.id
    assert payload["data"]["pages"] == rt.store.artifact(job.id).pages  # type: ignore[union-attr]
    assert receiver.bad_signatures == 0
