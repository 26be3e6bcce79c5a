"""ProviderClient: idempotent submit, classified observations, downloads that never carry the API
credential to a signed URL. Loopback fake provider, plus httpx.MockTransport for exact edge answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from email.utils import format_datetime

import httpx
import pytest

from docfence.core.clock import FakeClock
from docfence.providers import (
    ObservationKind,
    ProviderClient,
    ProviderConfig,
    Secret,
    docfence_preset,
    parse_retry_after,
)
from docfence.providers.errors import (
    ProviderDownloadFailed,
    ProviderMalformed,
    ProviderRedirectRefused,
    ProviderRejected,
    ProviderUnavailable,
)
from docfence.testing.fake_provider import FakeProvider

from .conftest import FAST, FakeTime

API = "https://api.render.test"
Handler = Callable[[httpx.Request], httpx.Response]


def mock_client(handler: Handler, ftime: FakeTime, **changes: object) -> ProviderClient:
    config = docfence_preset(API, "mock-key", poll=FAST, **changes)
    return ProviderClient(
        config, transport=httpx.MockTransport(handler), clock=ftime.clock, sleep=ftime.sleep
    )


def custom_config(fake: FakeProvider, **changes: object) -> ProviderConfig:
    settings: dict[str, object] = {
        "name": "custom",
        "submit_url": f"{fake.base_url}/v1/jobs",
        "status_url": f"{fake.base_url}/v1/jobs/{{id}}",
        "running": {"queued"},
        "succeeded": {"succeeded"},
        "failed": {"failed"},
        "result_url_path": "result_url",
        "auth_secret": Secret(fake.api_key),
        "poll": FAST,
    }
    settings.update(changes)
    return ProviderConfig(**settings)  # type: ignore[arg-type]


# -- submit ------------------------------------------------------------------------------------------


def test_submit_sends_multipart_key_and_auth(fake: FakeProvider, client: ProviderClient) -> None:
    job_id = client.submit(b"%PDF-1.7 in", idempotency_key="req-1", filename="r.pdf", fields={"policy": "{}"})
    job = fake.jobs[job_id]
    assert job.filename == "r.pdf" and job.data == b"%PDF-1.7 in" and job.fields == {"policy": "{}"}
    (post,) = fake.requests_to("api", "/v1/jobs", method="POST")
    assert post.headers["idempotency-key"] == "req-1"
    assert post.headers["authorization"] == f"Bearer {fake.api_key}"


def test_submit_twice_with_same_key_creates_one_job(fake: FakeProvider, client: ProviderClient) -> None:
    first = client.submit(b"a", idempotency_key="same", filename="a.pdf")
    second = client.submit(b"a", idempotency_key="same", filename="a.pdf")
    assert first == second and fake.creations == 1
    assert client.submit(b"a", idempotency_key="other", filename="a.pdf") != first
    assert fake.creations == 2


def test_lost_answer_is_retried_with_the_same_key(
    fake: FakeProvider, client: ProviderClient, ftime: FakeTime
) -> None:
    fake.submit_script = [("drop_after_create",), ("http", 503)]
    job_id = client.submit(b"a", idempotency_key="k-lost", filename="a.pdf")
    assert fake.creations == 1 and list(fake.jobs) == [job_id]
    posts = fake.requests_to("api", "/v1/jobs", method="POST")
    assert [p.headers["idempotency-key"] for p in posts] == ["k-lost"] * 3
    assert ftime.sleeps == [1, 2]


def test_submit_honours_retry_after(fake: FakeProvider, client: ProviderClient, ftime: FakeTime) -> None:
    fake.submit_script = [("http", 429, {"Retry-After": "4"})]
    client.submit(b"a", idempotency_key="k", filename="a.pdf")
    assert ftime.sleeps == [4] and fake.creations == 1


def test_submit_gives_up_after_bounded_attempts(fake: FakeProvider, client: ProviderClient) -> None:
    fake.submit_script = [("http", 503)] * 3
    with pytest.raises(ProviderUnavailable):
        client.submit(b"a", idempotency_key="k", filename="a.pdf")
    assert len(fake.requests_to("api", "/v1/jobs", method="POST")) == 3 and fake.creations == 0


def test_submit_4xx_is_rejected_without_retry(fake: FakeProvider, client: ProviderClient) -> None:
    fake.submit_script = [("http", 422)]
    with pytest.raises(ProviderRejected):
        client.submit(b"a", idempotency_key="k", filename="a.pdf")
    assert len(fake.requests_to("api", "/v1/jobs", method="POST")) == 1


def test_without_idempotency_header_nothing_is_retried(fake: FakeProvider, ftime: FakeTime) -> None:
    config = docfence_preset(fake.base_url, fake.api_key, idempotency_header=None)
    fake.submit_script = [("drop_after_create",)]
    with (
        ProviderClient(config, clock=ftime.clock, sleep=ftime.sleep) as client,
        pytest.raises(ProviderUnavailable),
    ):
        client.submit(b"a", idempotency_key="k", filename="a.pdf")
    assert fake.creations == 1 and len(fake.requests_to("api", "/v1/jobs", method="POST")) == 1


@pytest.mark.parametrize(
    "body", [b"{}", b"not json", b'{"id": true}', b'{"id": ""}', json.dumps({"id": "x" * 300}).encode()]
)
def test_submit_answer_without_usable_id_is_malformed(body: bytes, ftime: FakeTime) -> None:
    with (
        mock_client(lambda r: httpx.Response(201, content=body), ftime) as client,
        pytest.raises(ProviderMalformed),
    ):
        client.submit(b"a", idempotency_key="k", filename="a.pdf")


def test_submit_json_style_and_numeric_id(ftime: FakeTime) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json={"data": {"id": 42}})

    with mock_client(
        handler, ftime, submit_style="json", file_field="document", job_id_path="data.id"
    ) as client:
        assert client.submit(b"PDF", idempotency_key="k", filename="a.pdf", fields={"tenant": "t1"}) == "42"
    body = json.loads(seen[0].content)
    assert body == {"tenant": "t1", "document": "UERG", "filename": "a.pdf"}


def test_submit_rejects_bad_idempotency_key(client: ProviderClient) -> None:
    with pytest.raises(ValueError):
        client.submit(b"a", idempotency_key="", filename="a.pdf")
    with pytest.raises(ValueError):
        client.submit(b"a", idempotency_key="a\nb", filename="a.pdf")


# -- observe -----------------------------------------------------------------------------------------


def test_observe_stamps_time_from_the_injected_clock(
    fake: FakeProvider, client: ProviderClient, ftime: FakeTime
) -> None:
    job_id = fake.add_job([("status", "rendering")])
    ftime.clock.advance(90)
    obs = client.observe(job_id)
    assert obs.kind is ObservationKind.RUNNING and obs.status == "rendering" and obs.http_status == 200
    assert obs.observed_at == ftime.clock.now()


def test_observe_classifies_without_raising(fake: FakeProvider, client: ProviderClient) -> None:
    cases = {
        ("status", "succeeded"): ObservationKind.SUCCEEDED,
        ("status", "failed", "boom"): ObservationKind.FAILED,
        ("status", "x" * 500): ObservationKind.UNKNOWN_STATUS,
        ("raw", b"{"): ObservationKind.MALFORMED,
        ("raw", b"[" * 100_000): ObservationKind.MALFORMED,
        ("http", 429): ObservationKind.RATE_LIMITED,
        ("http", 500): ObservationKind.HTTP_ERROR,
        ("drop",): ObservationKind.TRANSPORT_ERROR,
    }
    for step, kind in cases.items():
        obs = client.observe(fake.add_job([step]))
        assert obs.kind is kind, step
        assert obs.status is None or len(obs.status) <= 64
    assert client.observe("no-such-job").http_status == 404


def test_observe_unreachable_provider_is_a_transport_error(ftime: FakeTime) -> None:
    config = docfence_preset("http://127.0.0.1:9", "k")  # discard port: nothing listens
    with ProviderClient(config, clock=ftime.clock, timeout_s=1) as client:
        assert client.observe("j").kind is ObservationKind.TRANSPORT_ERROR


def test_observe_percent_encodes_the_job_id(ftime: FakeTime) -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path.decode())
        return httpx.Response(200, json={"state": "queued"})

    with mock_client(handler, ftime) as client:
        client.observe("../admin?x=1")
    assert paths == ["/v1/jobs/..%2Fadmin%3Fx%3D1"]


def test_oversized_status_answer_is_malformed(ftime: FakeTime) -> None:
    big = json.dumps({"state": "queued", "pad": "x" * 5000}).encode()
    with mock_client(lambda r: httpx.Response(200, content=big), ftime, max_status_bytes=1000) as client:
        assert client.observe("j").kind is ObservationKind.MALFORMED


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ("/files/j.pdf?sig=1", f"{API}/files/j.pdf?sig=1"),
        ("https://cdn.test/j.pdf", "https://cdn.test/j.pdf"),
        ("javascript:alert(1)", None),
        ("https://u:p@cdn.test/j.pdf", None),
        (17, None),
    ],
)
def test_result_url_from_status_json(result: object, expected: str | None, ftime: FakeTime) -> None:
    answer = {"state": "succeeded", "links": {"pdf": result}}
    handler: Handler = lambda r: httpx.Response(200, json=answer)  # noqa: E731
    client = mock_client(
        handler, ftime, result_url_template=None, result_url_path="links.pdf", result_auth=False
    )
    with client:
        obs = client.observe("j")
    assert obs.result_url == expected
    assert obs.kind is (ObservationKind.SUCCEEDED if expected else ObservationKind.MALFORMED)


def test_parse_retry_after() -> None:
    now = FakeClock().now()
    date = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after("5", now=now, cap_s=60) == 5
    assert parse_retry_after(" 120 ", now=now, cap_s=60) == 60
    assert parse_retry_after(date, now=now, cap_s=60) == 30
    assert parse_retry_after(date, now=now, cap_s=10) == 10
    assert parse_retry_after(format_datetime(now - timedelta(days=1), usegmt=True), now=now, cap_s=60) == 0
    for junk in (None, "", "-5", "1.5", "soon", "Mon, 99 Foo 2026"):
        assert parse_retry_after(junk, now=now, cap_s=60) is None


# -- download ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [302, 303, 307])
def test_download_never_sends_auth_to_the_signed_url(
    fake: FakeProvider, client: ProviderClient, code: int
) -> None:
    fake.artifact_redirect_code = code
    job_id = fake.add_job([("status", "succeeded")])
    obs = client.observe(job_id)
    assert obs.result_url is not None
    assert client.download_result(obs.result_url) == fake.artifact
    (first,) = fake.requests_to("api", f"/v1/jobs/{job_id}/artifact")
    assert first.headers["authorization"] == f"Bearer {fake.api_key}"
    (signed,) = fake.requests_to("storage")
    assert "authorization" not in signed.headers and signed.path.startswith(f"/signed/{job_id}?sig=")


def test_presigned_url_from_status_json_gets_no_auth_at_all(fake: FakeProvider, ftime: FakeTime) -> None:
    with ProviderClient(custom_config(fake), clock=ftime.clock) as client:
        job_id = fake.add_job([("status", "succeeded")])
        obs = client.observe(job_id)
        assert obs.result_url == fake.signed_url(job_id)
        assert client.download_result(obs.result_url) == fake.artifact
    assert [r.headers.get("authorization") for r in fake.requests_to("storage")] == [None]


def test_api_origin_result_without_result_auth_gets_no_auth(fake: FakeProvider, ftime: FakeTime) -> None:
    job_id = fake.add_job([("status", "succeeded")])
    with (
        ProviderClient(custom_config(fake), clock=ftime.clock) as client,
        pytest.raises(ProviderDownloadFailed),
    ):
        client.download_result(f"{fake.base_url}/v1/jobs/{job_id}/artifact")  # the fake answers 401
    (request,) = fake.requests_to("api", f"/v1/jobs/{job_id}/artifact")
    assert "authorization" not in request.headers


def redirecting(locations: list[str | None], seen: list[httpx.Request]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) <= len(locations):
            location = locations[len(seen) - 1]
            return httpx.Response(302, headers={"Location": location} if location else {})
        return httpx.Response(200, content=b"%PDF")

    return handler


def test_redirect_hops_never_carry_auth_even_on_the_same_origin(ftime: FakeTime) -> None:
    seen: list[httpx.Request] = []
    hops = [f"{API}/v1/blobs/1", "https://other.test/signed?sig=1"]
    with mock_client(redirecting(hops, seen), ftime) as client:
        assert client.download_result(f"{API}/v1/jobs/j/artifact") == b"%PDF"
    assert [("authorization" in r.headers) for r in seen] == [True, False, False]


def test_first_hop_on_a_foreign_origin_gets_no_auth(ftime: FakeTime) -> None:
    seen: list[httpx.Request] = []
    with mock_client(redirecting([], seen), ftime) as client:
        client.download_result("https://evil.test/v1/jobs/j/artifact")
    assert "authorization" not in seen[0].headers


@pytest.mark.parametrize(
    "locations",
    [
        [None],
        ["ftp://files.test/x.pdf"],
        ["https://user:pw@files.test/x.pdf"],
        ["http://files.test/x.pdf"],  # https -> http downgrade
        [f"{API}/loop"] * 6,
    ],
)
def test_unsafe_redirects_are_refused(locations: list[str | None], ftime: FakeTime) -> None:
    with mock_client(redirecting(locations, []), ftime) as client, pytest.raises(ProviderRedirectRefused):
        client.download_result(f"{API}/v1/jobs/j/artifact")


def test_download_failures(ftime: FakeTime) -> None:
    with mock_client(lambda r: httpx.Response(404), ftime) as client, pytest.raises(ProviderDownloadFailed):
        client.download_result(f"{API}/x")
    big: Handler = lambda r: httpx.Response(200, content=b"x" * 2000)  # noqa: E731
    with mock_client(big, ftime, max_result_bytes=1000) as client, pytest.raises(ProviderDownloadFailed):
        client.download_result(f"{API}/x")

    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with mock_client(broken, ftime) as client, pytest.raises(ProviderUnavailable):
        client.download_result(f"{API}/x")
    with mock_client(broken, ftime) as client, pytest.raises(ProviderRedirectRefused):
        client.download_result("file:///etc/passwd")
