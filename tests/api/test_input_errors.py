"""Bad input is refused at the door with a message that names the field and what is allowed."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from docfence.client import DocfenceClient, Gone, InvalidRequest, TransportError, UnsupportedMediaType

from .conftest import PDF, ApiEnv


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_uploads_are_sniffed_before_a_job_exists(env: ApiEnv) -> None:
    key = env.key()
    url = f"{env.base_url}/v1/jobs"
    empty = httpx.post(url, headers=_auth(key), files={"file": ("a.pdf", b"")})
    docx = httpx.post(url, headers=_auth(key), files={"file": ("a.docx", b"PK\x03\x04" + b"\0" * 2000)})
    late = httpx.post(url, headers=_auth(key), files={"file": ("a.pdf", b" " * 1024 + b"%PDF-1.4\n")})
    assert (empty.status_code, empty.json()["error"]["code"]) == (400, "empty_upload")
    assert (docx.status_code, docx.json()["error"]["code"]) == (415, "unsupported_media_type")
    assert late.status_code == 415
    assert env.store.list_jobs() == []
    assert not [p for p in (env.tmp / "objects").rglob("*") if p.is_file()]
    junk_first = httpx.post(url, headers=_auth(key), files={"file": ("a.pdf", b"\0" * 1000 + PDF)})
    assert junk_first.status_code == 201  # within the first 1024 bytes, as PDF readers accept
    stored = env.store.get(junk_first.json()["id"])
    assert stored.input_bytes == 1000 + len(PDF)  # the sniffed head was stored, not dropped


def test_deadline_and_class_errors_quote_the_real_limits(env: ApiEnv) -> None:
    with env.client() as client:
        with pytest.raises(InvalidRequest) as too_long:
            client.submit(PDF, deadline_s=99999999)
        with pytest.raises(InvalidRequest) as zero:
            client.submit(PDF, deadline_s=0)
        with pytest.raises(InvalidRequest) as unknown:
            client.submit(PDF, document_class="nope")
    assert too_long.value.field == "deadline_s"
    assert "deadline_s=1e+08: must be in (0, 3600] seconds for class default" in str(too_long.value)
    assert zero.value.field == "deadline_s"
    assert unknown.value.field == "document_class"
    assert "unknown class (configured: default)" in str(unknown.value)


def test_a_down_server_is_named_by_its_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with DocfenceClient(f"http://127.0.0.1:{port}", "dfk_000000000000_x") as client, \
            pytest.raises(TransportError, match=f"http://127.0.0.1:{port}"):
        client.get("job_x")


def test_download_of_a_deleted_job_says_gone(env: ApiEnv, tmp_path: Path) -> None:
    admin = env.key(scopes=("submit", "read", "admin"))
    with env.client(admin) as client:
        job = client.submit(PDF)
        env.finish(job.id)
        assert client.download(job.id, tmp_path).is_file()
        client._http.delete(f"/v1/jobs/{job.id}", params={"request_id": "DR-1"}).raise_for_status()
        with pytest.raises(Gone) as gone:
            client.download(job.id, tmp_path / "again.pdf")
    assert gone.value.server_code == "artifact_gone" and gone.value.status == 410


def test_not_a_pdf_is_a_client_error_with_its_own_class(env: ApiEnv) -> None:
    with env.client() as client, pytest.raises(UnsupportedMediaType) as caught:
        client.submit(b"<html>not a pdf</html>")
    assert caught.value.status == 415


def test_a_bad_watermark_names_its_field(env: ApiEnv) -> None:
    with env.client() as client, pytest.raises(InvalidRequest) as bad:
        client.submit(PDF, watermark={"txt": "x"})
    assert bad.value.server_code == "invalid_watermark" and bad.value.field == "watermark"
    assert "unknown watermark field 'txt'" in str(bad.value) and "__init__" not in str(bad.value)
