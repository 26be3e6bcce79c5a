"""Malformed input is a 400 that names what is wrong, never a 500, a 422 for a broken body, or a job
that fails later: watermark specs are checked for types, ranges, finite numbers and unknown fields at
submission, and a truncated multipart body is refused as such."""

from __future__ import annotations

import socket

import httpx
import pytest

from docfence.core.errors import ConfigError
from docfence.core.policy import WatermarkSpec

from .conftest import PDF, ApiEnv

BAD_WATERMARKS = [
    ('{"pages": 5}', "pages"),
    ('{"angle": "x"}', "angle"),
    ('{"angle": NaN}', "NaN"),
    ('{"opacity": Infinity}', "Infinity"),
    ('{"opacity": 1e400}', "opacity"),
    ('{"opacity": 7}', "opacity"),
    ('{"opacity": true}', "opacity"),
    ('{"font_size": [1]}', "font_size"),
    ('{"angle": 1e308}', "angle"),
    ('{"color": [1, 0]}', "color"),
    ('{"color": "red"}', "color"),
    ('{"color": [0, 0, null]}', "color"),
    ('{"text": 12}', "text"),
    ('{"text": ""}', "text"),
    ('{"layer": ["overlay"]}', "layer"),
    ('{"position": null}', "position"),
    ('{"nope": 1}', "nope"),
    ("{not json", "JSON"),
    ("[1, 2]", "JSON object"),
]


@pytest.mark.parametrize(("raw", "named"), BAD_WATERMARKS)
def test_bad_watermark_specs_are_400s_that_name_the_field(env: ApiEnv, raw: str, named: str) -> None:
    headers = {"Authorization": f"Bearer {env.key()}"}
    response = httpx.post(
        f"{env.base_url}/v1/jobs", headers=headers, files={"file": ("a.pdf", PDF)}, data={"watermark": raw}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_watermark" and named in error["message"]
    assert env.store.list_jobs() == []


def test_good_watermark_specs_are_accepted(env: ApiEnv) -> None:
    with env.client() as client:
        job = client.submit(
            PDF, watermark={"angle": 45, "opacity": 0.5, "color": [0, 0.5, 1], "pages": "1-2"}
        )
    stored = env.store.get(job.id).policy.watermark
    assert stored is not None and stored.angle == 45 and stored.color == (0.0, 0.5, 1.0)


@pytest.mark.parametrize("field", ["opacity", "angle", "font_size"])
def test_spec_refuses_non_finite_numbers_directly(field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        WatermarkSpec(**{field: float("nan")})


def test_a_truncated_multipart_body_is_a_400(env: ApiEnv) -> None:
    boundary = "XyZ"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.pdf"\r\n'
        f"Content-Type: application/pdf\r\n\r\n"
    ).encode() + PDF  # no closing boundary
    host, port = env.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            (
                f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {env.key()}\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    assert response.startswith(b"HTTP/1.1 400 "), response[:200]
    assert b'"malformed_request"' in response and b"closing boundary" in response
    assert env.store.list_jobs() == []


def test_the_client_raises_invalid_request_for_a_bad_watermark(env: ApiEnv) -> None:
    from docfence.client import InvalidRequest

    with env.client() as client, pytest.raises(InvalidRequest, match="opacity"):
        client.submit(PDF, watermark={"opacity": 2})
