"""JSON log lines carry job id and attempt, and secrets are redacted even if code logs them by mistake."""

from __future__ import annotations

import json
import logging

import pytest

from docfence.logs import JsonFormatter, RedactingFilter, redact


def test_json_line_has_context_and_no_secret(capsys: pytest.CaptureFixture[str]) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("docfence.test-logs")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("download via /v1/signed/eyJhbGciOi.abc and key dfk_abc123_SECRETSECRET",
                    extra={"job_id": "job_1", "attempt": 2, "unrelated": "dropped"})
    finally:
        log.removeHandler(handler)
    line = json.loads(capsys.readouterr().err.strip())
    assert line["job_id"] == "job_1" and line["attempt"] == 2 and "unrelated" not in line
    assert "SECRETSECRET" not in line["msg"] and "eyJhbGciOi" not in line["msg"]


@pytest.mark.parametrize("secret", [
    "Authorization: Bearer abc.def-ghi", "https://s3.example/x?X-Amz-Signature=deadbeef&a=1",
    "dfk_kid_s3cr3t", "/v1/signed/tok.en"])
def test_redact(secret: str) -> None:
    assert "[redacted]" in redact(secret)
