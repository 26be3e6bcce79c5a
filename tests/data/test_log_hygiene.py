"""The whole pipeline with sentinel strings planted in document text, template data, an API key, a
signed URL, a PDF password, a label and a filename: every log line (API server, worker, this process)
and every audit event is free of them."""

from __future__ import annotations

import base64
import io
import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pikepdf
import pytest

from docfence.client import DocfenceClient
from docfence.config import load_settings
from docfence.samples.monthly_report import load_monthly_bundle, sample_monthly_data
from docfence.service import build_service
from docfence.testing.procs import long_budget_config, start_worker, stop, wait_for, worker_env
from docfence.wiring import Runtime

DOC_SENTINEL = "SENTINELDOCTEXT7F3A"
DATA_SENTINEL = "SENTINELTEMPLATEDATA91B2"
PASSWORD_SENTINEL = "SENTINELPASSWORD4C8D"
LABEL_SENTINEL = "SENTINELLABEL2E6F"
FILENAME_SENTINEL = "SENTINELFILENAME5A0B.pdf"


def sentinel_pdf() -> bytes:
    pdf = pikepdf.new()
    font = pdf.make_indirect(pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1,
                                                BaseFont=pikepdf.Name.Helvetica))
    content = f"BT /F1 14 Tf 72 700 Td (Patient note {DOC_SENTINEL}) Tj ET".encode()
    page = pikepdf.Dictionary(Type=pikepdf.Name.Page, MediaBox=[0, 0, 595, 842],
                              Resources=pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font)),
                              Contents=pdf.make_stream(content))
    pdf.pages.append(pikepdf.Page(page))
    buf = io.BytesIO()
    pdf.save(buf)
    return buf.getvalue()


def encrypted_sentinel_pdf() -> bytes:
    buf = io.BytesIO()
    pikepdf.open(io.BytesIO(sentinel_pdf())).save(
        buf, encryption=pikepdf.Encryption(owner="o" + PASSWORD_SENTINEL, user=PASSWORD_SENTINEL, R=6))
    return buf.getvalue()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


HANG_GUARD_S = 120.0  # waits end on events; this only stops a broken build from hanging
# Leases are long (DOCFENCE_LEASE_TTL_S) so a starved worker cannot lose one and fail the job.


def test_no_sentinel_reaches_logs_or_audit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    (tmp_path / "objects").mkdir()
    env = worker_env(f"sqlite:///{tmp_path / 'db.sqlite'}", f"file://{tmp_path / 'objects'}",
                     DOCFENCE_SIGNING_SECRET="s" * 40, DOCFENCE_LEASE_TTL_S="120",
                     **long_budget_config(tmp_path))
    rt = Runtime.open(load_settings(env=env))
    service = build_service(rt.settings, rt.store, rt.regions)
    _, api_key = service.create_api_key("acme", ("admin",), name="hygiene")
    port = free_port()
    api_log, worker_log = tmp_path / "api.log", tmp_path / "worker.log"
    with api_log.open("wb") as out:
        api = subprocess.Popen([sys.executable, "-m", "docfence.cli", "serve", "--port", str(port),
                                "--log-level", "debug"], env=env, stdout=out, stderr=subprocess.STDOUT)
    worker = start_worker(dict(env, DOCFENCE_LOG_LEVEL="DEBUG"), worker_log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(base), HANG_GUARD_S, "the API server")
        auth = {"Authorization": f"Bearer {api_key}"}
        with DocfenceClient(base, api_key) as client:
            job = client.submit(sentinel_pdf())
            done = client.wait(job.id, budget_s=HANG_GUARD_S)
            assert done.state == "succeeded"
            client.download(job.id, tmp_path / "out.pdf")
            locked = client.submit((FILENAME_SENTINEL, encrypted_sentinel_pdf()), password=PASSWORD_SENTINEL,
                                   label=LABEL_SENTINEL)
            assert client.wait(locked.id, budget_s=HANG_GUARD_S).state == "succeeded"
        signed = httpx.get(f"{base}/v1/jobs/{job.id}/artifact", headers=auth).headers["location"]
        assert httpx.get(f"{base}{signed}").status_code == 200
        bundle = load_monthly_bundle()
        template = {"id": "monthly", "html": bundle.html, "css": bundle.css, "schema": bundle.schema,
                    "assets": {k: base64.b64encode(v).decode() for k, v in bundle.assets.items()}}
        assert httpx.post(f"{base}/v1/templates", json=template, headers=auth).status_code in (200, 201)
        data = sample_monthly_data(pages=1)
        data["clinic"] = DATA_SENTINEL
        made = httpx.post(f"{base}/v1/report-requests", headers=auth, json={
            "subject": "clinic-1", "period": "2026-10", "template": "monthly@1", "data": data})
        assert made.status_code == 201, made.text
        report_job = made.json()["jobs"][-1]["id"]
        wait_for(lambda: rt.store.get(report_job).state.terminal, HANG_GUARD_S, "the report job")
        assert rt.store.get(report_job).state.value == "succeeded", rt.store.get(report_job).last_error_code
    finally:
        stop(worker)
        stop(api)
    token = signed.rsplit("/", 1)[1]
    secrets = {"document text": DOC_SENTINEL, "template data": DATA_SENTINEL, "API key": api_key,
               "API key secret": api_key.split("_", 2)[2], "signed URL token": token,
               "PDF password": PASSWORD_SENTINEL, "label": LABEL_SENTINEL, "filename": FILENAME_SENTINEL}
    logs = api_log.read_text() + worker_log.read_text() + "\n".join(r.getMessage() for r in caplog.records)
    audit = "\n".join(json.dumps(e.__dict__, default=str) for e in rt.store.iter_audit())
    assert len(logs) > 500 and "job_id" in logs  # the logs are there, structured, and saying things
    for what, value in secrets.items():
        assert value not in logs, f"{what} leaked into a log line"
        assert value not in audit, f"{what} leaked into the audit trail"


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
