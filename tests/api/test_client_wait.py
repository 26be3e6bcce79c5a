"""The client's bounded wait (a finite budget, backoff with jitter that honours Retry-After, a timeout
that is not a job failure) and its error mapping, over a mock transport."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from docfence.client import (
    ArtifactMissing,
    DocfenceClient,
    JobCanceled,
    JobFailed,
    JobNotFound,
    PollTimeout,
    ServerError,
    TransportError,
    UnknownState,
)
from docfence.core.errors import ApiError

ARTIFACT = {"sha256": "a" * 64, "bytes": 10, "pages": 1}


def job(state: str, **extra: Any) -> dict[str, Any]:
    return {"id": "job_1", "state": state, "attempt": 1, "max_attempts": 3, "mode": "vector",
            "document_class": "default", "deadline_at": "2026-01-01T00:00:00Z",
            "created_at": "2026-01-01T00:00:00Z", "finished_at": None, "error": None, "artifact": None,
            **extra}


class FakeTime:
    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []  # type: ignore[var-annotated]

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 3))
        self.now += seconds


def make(
    answers: Iterator[httpx.Response], jitter: float = 0.0
) -> tuple[DocfenceClient, FakeTime, list[str]]:
    fake, seen = FakeTime(), []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return next(answers)

    client = DocfenceClient("http://docfence.test", "dfk_000000000000_x",
                            transport=httpx.MockTransport(handler), sleep=fake.sleep, clock=fake.clock,
                            jitter=lambda: jitter)
    return client, fake, seen


def forever(body: dict[str, Any], headers: dict[str, str] | None = None) -> Iterator[httpx.Response]:
    while True:
        yield httpx.Response(200, json=body, headers=headers)


def test_backoff_doubles_from_250ms_to_a_4s_cap_then_times_out_with_the_job_id() -> None:
    client, fake, _ = make(forever(job("rendering")))
    with pytest.raises(PollTimeout) as caught:
        client.wait("job_1", budget_s=20)
    assert fake.sleeps[:7] == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert fake.now == pytest.approx(20.0) and sum(fake.sleeps) <= 20.0 + 1e-9
    assert caught.value.job_id == "job_1" and caught.value.last is not None
    assert caught.value.code == "poll_timeout" and not isinstance(caught.value, JobFailed)


def test_jitter_adds_at_most_a_quarter() -> None:
    client, fake, _ = make(forever(job("queued")), jitter=0.999)
    with pytest.raises(PollTimeout):
        client.wait("job_1", budget_s=3)
    assert fake.sleeps[0] == pytest.approx(0.25 * 1.25, abs=1e-3)


def test_server_retry_after_hint_is_honoured() -> None:
    client, fake, _ = make(forever(job("queued"), {"Retry-After": "2"}))
    with pytest.raises(PollTimeout):
        client.wait("job_1", budget_s=9)
    assert fake.sleeps[:4] == [2.0, 2.0, 2.0, 2.0]


def test_stops_on_success_with_an_artifact() -> None:
    answers = iter([httpx.Response(200, json=job("queued")), httpx.Response(200, json=job("rendering")),
                    httpx.Response(200, json=job("succeeded", artifact=ARTIFACT))])
    client, fake, seen = make(answers)
    done = client.wait("job_1")
    assert done.artifact is not None and done.artifact.sha256 == "a" * 64
    assert len(seen) == 3 and fake.sleeps == [0.25, 0.5]


@pytest.mark.parametrize(("state", "error"), [("failed", JobFailed), ("canceled", JobCanceled)])
def test_stops_at_once_on_failed_and_canceled(state: str, error: type[ApiError]) -> None:
    body = job(state, error={"code": "deadline_exceeded", "message": "the job's deadline passed"})
    client, fake, seen = make(forever(body))
    with pytest.raises(error) as caught:
        client.wait("job_1")
    assert len(seen) == 1 and fake.sleeps == []
    assert "deadline_exceeded" in caught.value.message


def test_succeeded_without_artifact_and_unknown_state_are_errors() -> None:
    client, _, _ = make(forever(job("succeeded")))
    with pytest.raises(ArtifactMissing):
        client.wait("job_1")
    client, _, _ = make(forever(job("paused")))
    with pytest.raises(UnknownState):
        client.wait("job_1")


def test_http_errors_map_to_specific_classes_with_the_server_code() -> None:
    answers = iter([httpx.Response(404, json={"error": {"code": "not_found", "message": "no job job_1"}}),
                    httpx.Response(503, text="upstream down")])
    client, _, _ = make(answers)
    with pytest.raises(JobNotFound) as missing:
        client.wait("job_1")
    assert missing.value.status == 404 and missing.value.server_code == "not_found"
    with pytest.raises(ServerError) as down:
        client.get("job_1")
    assert down.value.status == 503 and down.value.server_code == "http_error"


def test_transport_errors_are_translated() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = DocfenceClient("http://docfence.test", "k", transport=httpx.MockTransport(refuse))
    with pytest.raises(TransportError):
        client.get("job_1")


def test_client_error_classes_have_stable_distinct_codes() -> None:
    classes = (PollTimeout, JobFailed, JobCanceled, UnknownState, ArtifactMissing, TransportError,
               ServerError, JobNotFound)
    codes = [cls.code for cls in classes]
    assert codes[:5] == ["poll_timeout", "job_failed", "job_canceled", "unknown_state", "artifact_missing"]
    assert len(set(codes)) == len(codes)
    for cls in classes:  # core's all_codes() builds every error class without arguments
        assert issubclass(cls, ApiError) and cls().message


def test_the_client_lets_idle_connections_go_before_the_server_closes_them() -> None:
    """A request on a reused connection that the server is closing fails ('connection reset'): the
    client's idle expiry must stay below the server's default keep-alive, whichever of the two changes."""
    from docfence.client.http import KEEPALIVE_EXPIRY_S
    from docfence.config import ServerConfig

    assert 0 < KEEPALIVE_EXPIRY_S <= ServerConfig().keep_alive_s / 2
    client = DocfenceClient("http://127.0.0.1:9", "key")
    try:
        for http in (client._http, client._public):
            assert http._transport._pool._keepalive_expiry == KEEPALIVE_EXPIRY_S  # type: ignore[attr-defined]
    finally:
        client.close()
