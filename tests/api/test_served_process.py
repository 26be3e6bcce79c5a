"""The API as its own process (`python -m docfence.api`, what `docfence serve` runs): its output never
shows a key or a signed-URL token, even at debug level."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from docfence.client import DocfenceClient
from docfence.config import Settings
from docfence.service import build_service
from docfence.testing.servers import serve_process

from .conftest import PDF, ApiEnv


def test_served_process_logs_no_key_or_token(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path}/docfence.db", storage_url=f"file://{tmp_path}/objects")
    service = build_service(settings)
    key = service.create_api_key("acme", ("submit", "read"))[1]
    env = dict(os.environ, DOCFENCE_DATABASE_URL=settings.database_url,
               DOCFENCE_STORAGE_URL=settings.storage_url)
    log_path = tmp_path / "server.log"
    served = serve_process(env, log_path, command=("docfence.api",), log_level="debug")
    with served as (_proc, base), DocfenceClient(base, key) as client:
        job = client.submit(PDF)
        helper = ApiEnv(settings, service.store, service, None, base, tmp_path)  # type: ignore[arg-type]
        helper.finish(job.id)
        client.download(job.id, tmp_path / "out.pdf")
        auth = {"Authorization": f"Bearer {key}"}
        redirect = httpx.get(f"{base}/v1/jobs/{job.id}/artifact", headers=auth)
        token = redirect.headers["location"].removeprefix("/v1/signed/")
        assert httpx.get(f"{base}/v1/signed/{token}").status_code == 200
    output = log_path.read_text("utf-8", "replace")
    assert "docfence API running on" in output
    assert token not in output and "/v1/signed/" not in output
    assert key.split("_", 2)[2] not in output
