"""The API as its own process (`python -m docfence.api`, what `docfence serve` runs): its output never
shows a key or a signed-URL token, even at debug level."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from docfence.client import DocfenceClient
from docfence.config import Settings
from docfence.service import build_service

from .conftest import PDF, ApiEnv


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_served_process_logs_no_key_or_token(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/docfence.db", storage_url=f"file://{tmp_path}/objects")
    service = build_service(settings)
    key = service.create_api_key("acme", ("submit", "read"))[1]
    port = _free_port()
    env = dict(os.environ, DOCFENCE_DATABASE_URL=settings.database_url,
               DOCFENCE_STORAGE_URL=settings.storage_url)
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        cmd = [sys.executable, "-m", "docfence.api", "--port", str(port), "--log-level", "debug"]
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(200):
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            with DocfenceClient(base, key) as client:
                job = client.submit(PDF)
                helper = ApiEnv(settings, service.store, service, None, base, tmp_path)  # type: ignore[arg-type]
                helper.finish(job.id)
                client.download(job.id, tmp_path / "out.pdf")
                redirect = httpx.get(f"{base}/v1/jobs/{job.id}/artifact",
                                     headers={"Authorization": f"Bearer {key}"})
                token = redirect.headers["location"].removeprefix("/v1/signed/")
                assert httpx.get(f"{base}/v1/signed/{token}").status_code == 200
        finally:
            proc.terminate()
            proc.wait(10)
    output = log_path.read_text("utf-8", "replace")
    assert "Uvicorn running" in output or "Application startup complete" in output
    assert token not in output and "/v1/signed/" not in output
    assert key.split("_", 2)[2] not in output
