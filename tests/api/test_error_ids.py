"""Every 500 answer carries an error id (body `error.error_id` and the X-Error-Id header), and the server
log holds that error's traceback at ERROR under the same id, without --debug and without the exception's
message; storage_full answers 507."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from docfence.api import create_app
from docfence.api.errors import ERROR_ID_HEADER, STATUS_BY_CODE, status_for
from docfence.config import Settings
from docfence.core.errors import StorageFull
from docfence.service import build_service
from docfence.testing.servers import running, serve_process

from .conftest import PDF

SECRET = "text-quoted-from-a-document"


def _settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path}/docfence.db", storage_url=f"file://{tmp_path}/objects")


def _app(tmp_path: Path) -> FastAPI:
    app = create_app(_settings(tmp_path))

    def boom() -> None:
        raise ValueError(SECRET)

    app.add_api_route("/boom", boom)
    return app


def test_an_unexpected_error_answers_500_with_an_error_id_logged_with_its_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="docfence.api.errors"), running(_app(tmp_path)) as base:
        answer = httpx.get(f"{base}/boom")
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert error["code"] == "internal_error" and error["error_id"].startswith("err_")
    assert answer.headers[ERROR_ID_HEADER] == error["error_id"]
    [record] = [r for r in caplog.records if error["error_id"] in r.getMessage()]
    assert record.levelno == logging.ERROR
    text = record.getMessage()
    assert "GET /boom" in text and "in boom" in text and "builtins.ValueError" in text
    assert SECRET not in caplog.text and SECRET not in answer.text


def test_an_unexpected_error_in_the_key_check_answers_500_with_an_error_id(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(tmp_path)
    service = app.state.service

    def broken(_token: str) -> None:
        raise RuntimeError(SECRET)

    monkeypatch.setattr(service, "authenticate", broken)
    with caplog.at_level(logging.ERROR, logger="docfence.api.errors"), running(app) as base:
        answer = httpx.get(f"{base}/v1/jobs", headers={"Authorization": "Bearer dfk_test_x"})
    assert answer.status_code == 500 and answer.headers["connection"] == "close"
    error_id = answer.json()["error"]["error_id"]
    assert answer.headers[ERROR_ID_HEADER] == error_id
    assert any(error_id in r.getMessage() and "in broken" in r.getMessage() for r in caplog.records)
    assert SECRET not in caplog.text


def test_the_500_shape_is_documented_with_its_error_id(tmp_path: Path) -> None:
    spec = _app(tmp_path).openapi()
    schemas = spec["components"]["schemas"]
    assert "error_id" in schemas["InternalErrorDetail"]["required"]
    documented = [op["responses"]["500"] for path in spec["paths"].values() for op in path.values()
                  if "500" in op.get("responses", {})]
    assert documented, "no route documents its 500 answer"
    assert all(r["content"]["application/json"]["schema"]["$ref"].endswith("/InternalErrorBody")
               for r in documented)


def test_storage_full_answers_507() -> None:
    assert STATUS_BY_CODE["storage_full"] == 507 and status_for(StorageFull("no space left on device")) == 507


def test_the_served_process_logs_the_traceback_under_the_error_id(tmp_path: Path) -> None:
    """`python -m docfence.cli serve` at its default level: an unexpected error during a submission (an
    injected fault) answers 500 and the JSON log line under its id carries the traceback."""
    settings = _settings(tmp_path)
    key = build_service(settings).create_api_key("acme", ("submit", "read"))[1]
    env = dict(os.environ, DOCFENCE_DATABASE_URL=settings.database_url,
               DOCFENCE_STORAGE_URL=settings.storage_url, DOCFENCE_FAULTS="after_input_upload=fail")
    log_path = tmp_path / "server.log"
    with serve_process(env, log_path, log_level="info") as (_proc, base):
        answer = httpx.post(f"{base}/v1/jobs", files={"file": ("a.pdf", PDF, "application/pdf")},
                            headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert answer.status_code == 500, answer.text
    error_id = answer.json()["error"]["error_id"]
    assert answer.headers[ERROR_ID_HEADER] == error_id
    lines = [json.loads(line) for line in log_path.read_text("utf-8").splitlines() if line.startswith("{")]
    [line] = [entry for entry in lines if error_id in entry["msg"]]
    assert line["level"] == "error"
    assert "Traceback (most recent call last)" in line["msg"] and "in fault_point" in line["msg"]
    assert "docfence.faults.InjectedFault" in line["msg"]
