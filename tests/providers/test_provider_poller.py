"""The rollout matrix (success, provider failure or cancel, malformed answers, 429 and 5xx with or without
Retry-After, stuck, unknown status) against the loopback fake provider: every path ends in a terminal coded
outcome, the sink sees every pass with time (and status when one was stated), nothing stays running."""

from __future__ import annotations

import logging
import random
import time
from datetime import datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from docfence.core.clock import SystemClock
from docfence.core.states import JobState
from docfence.providers import (
    BoundedPoller,
    ObservationKind,
    PollOutcome,
    PollOutcomeCode,
    PollPolicy,
    ProviderClient,
    ProviderConfig,
)
from docfence.providers.errors import ProviderDeadlineExceeded, ProviderJobFailed
from docfence.testing.fake_provider import FakeProvider

from .conftest import FakeTime, RecordingSink

Q = ("status", "queued")
R = ("status", "rendering")
OK = ("status", "succeeded")
STATED = {ObservationKind.RUNNING, ObservationKind.SUCCEEDED, ObservationKind.FAILED}


def assert_invariants(
    outcome: PollOutcome, sink: RecordingSink, fake: FakeProvider, ftime: FakeTime, deadline: datetime
) -> None:
    assert isinstance(outcome.outcome, PollOutcomeCode)
    assert outcome.terminal_state in (JobState.SUCCEEDED, JobState.FAILED)
    assert (outcome.terminal_state is JobState.SUCCEEDED) == (outcome.outcome is PollOutcomeCode.SUCCEEDED)
    assert len(sink.observations) == outcome.passes
    status_gets = [r for r in fake.requests_to("api", "/v1/jobs/") if r.method == "GET"]
    assert len(status_gets) == outcome.passes
    times = [o.observed_at for o in sink.observations]
    assert times == sorted(times)
    for obs in sink.observations:
        assert obs.provider_job_id == outcome.provider_job_id
        if obs.kind in STATED | {ObservationKind.UNKNOWN_STATUS}:
            assert obs.status
    if outcome.passes:
        assert outcome.last_observed_at == sink.observations[-1].observed_at
        assert outcome.last_kind is sink.observations[-1].kind
    assert ftime.clock.now() <= deadline, "the poller slept past the deadline"
    assert (outcome.error() is None) == (outcome.outcome is PollOutcomeCode.SUCCEEDED)


MATRIX: list[tuple[str, list[Any], PollOutcomeCode, int, str | None]] = [
    ("success", [Q, R, OK], PollOutcomeCode.SUCCEEDED, 3, "succeeded"),
    (
        "provider_failed",
        [Q, ("status", "failed", "template_error")],
        PollOutcomeCode.PROVIDER_FAILED,
        2,
        "failed",
    ),
    ("provider_canceled", [("status", "canceled")], PollOutcomeCode.PROVIDER_FAILED, 1, "canceled"),
    (
        "malformed_once_recovers",
        [("raw", b"<html>proxy</html>"), Q, OK],
        PollOutcomeCode.SUCCEEDED,
        3,
        "succeeded",
    ),
    ("malformed_repeated", [Q, ("raw", b"not json")], PollOutcomeCode.PROVIDER_MALFORMED, 3, "queued"),
    ("malformed_no_state", [("json", {"id": "x"})], PollOutcomeCode.PROVIDER_MALFORMED, 2, None),
    (
        "malformed_state_not_string",
        [("json", {"state": {"v": 1}})],
        PollOutcomeCode.PROVIDER_MALFORMED,
        2,
        None,
    ),
    ("malformed_json_list", [("raw", b"[1, 2]")], PollOutcomeCode.PROVIDER_MALFORMED, 2, None),
    ("unknown_status", [Q, ("status", "weird")], PollOutcomeCode.PROVIDER_UNKNOWN_STATUS, 2, "weird"),
    ("http_404", [Q, ("http", 404)], PollOutcomeCode.PROVIDER_HTTP_ERROR, 2, "queued"),
    ("http_403", [("http", 403)], PollOutcomeCode.PROVIDER_HTTP_ERROR, 1, None),
    (
        "http_301_not_followed",
        [("http", 301, {"Location": "/elsewhere"})],
        PollOutcomeCode.PROVIDER_HTTP_ERROR,
        1,
        None,
    ),
    (
        "flapping_5xx_recovers",
        [("http", 503), ("http", 502), ("http", 500), R, ("http", 503), ("http", 504), ("http", 500), OK],
        PollOutcomeCode.SUCCEEDED,
        8,
        "succeeded",
    ),
    ("5xx_exceeds_bound", [R, ("http", 503)], PollOutcomeCode.PROVIDER_UNAVAILABLE, 5, "rendering"),
    ("408_counts_as_transient", [("http", 408), OK], PollOutcomeCode.SUCCEEDED, 2, "succeeded"),
    ("transport_drop_recovers", [("drop",), ("drop",), OK], PollOutcomeCode.SUCCEEDED, 3, "succeeded"),
    ("transport_drop_exceeds", [("drop",)], PollOutcomeCode.PROVIDER_UNAVAILABLE, 4, None),
    (
        "mixed_5xx_and_drops_exceed",
        [("http", 502), ("drop",), ("http", 500), ("drop",)],
        PollOutcomeCode.PROVIDER_UNAVAILABLE,
        4,
        None,
    ),
    ("stuck_in_progress", [Q, R], PollOutcomeCode.DEADLINE, 10, "rendering"),
]


@pytest.mark.parametrize(
    ("script", "expected", "passes", "last_status"), [m[1:] for m in MATRIX], ids=[m[0] for m in MATRIX]
)
def test_rollout_matrix_always_ends_terminal(
    fake: FakeProvider,
    poller: BoundedPoller,
    sink: RecordingSink,
    ftime: FakeTime,
    script: list[Any],
    expected: PollOutcomeCode,
    passes: int,
    last_status: str | None,
) -> None:
    job_id = fake.add_job(script)
    deadline = ftime.deadline(60)
    outcome = poller.poll(job_id, deadline=deadline, sink=sink)
    assert outcome.outcome is expected
    assert outcome.passes == passes
    assert outcome.last_status == last_status
    assert_invariants(outcome, sink, fake, ftime, deadline)


def test_success_carries_result_url_and_download_skips_auth(
    fake: FakeProvider, client: ProviderClient, poller: BoundedPoller, sink: RecordingSink, ftime: FakeTime
) -> None:
    job_id = fake.add_job([Q, OK])
    outcome = poller.poll(job_id, deadline=ftime.deadline(30), sink=sink)
    assert outcome.succeeded and outcome.result_url == f"{fake.base_url}/v1/jobs/{job_id}/artifact"
    assert "result_url" not in repr(outcome)
    assert client.download_result(outcome.result_url) == fake.artifact
    assert [r.headers.get("authorization") for r in fake.requests_to("storage")] == [None]


def test_provider_failure_keeps_the_reason(
    fake: FakeProvider, poller: BoundedPoller, ftime: FakeTime
) -> None:
    job_id = fake.add_job([("status", "failed", "font_missing\x00\nDROP TABLE" + "x" * 500)])
    outcome = poller.poll(job_id, deadline=ftime.deadline(30), sink=RecordingSink())
    assert outcome.outcome is PollOutcomeCode.PROVIDER_FAILED and outcome.terminal_state is JobState.FAILED
    assert outcome.reason is not None and outcome.reason.startswith("font_missing??DROP TABLE")
    assert len(outcome.reason) <= 200 and outcome.reason.isprintable()
    error = outcome.error()
    assert isinstance(error, ProviderJobFailed) and error.code == "provider_failed"


def test_stuck_job_backs_off_and_never_sleeps_past_deadline(
    fake: FakeProvider, poller: BoundedPoller, sink: RecordingSink, ftime: FakeTime
) -> None:
    job_id = fake.add_job([Q])
    outcome = poller.poll(job_id, deadline=ftime.deadline(45), sink=sink)
    assert outcome.outcome is PollOutcomeCode.DEADLINE and outcome.terminal_state is JobState.FAILED
    assert ftime.sleeps == [1, 2, 4, 8, 8, 8, 8, 6]  # capped at 8, last wait cut to the deadline
    assert sum(ftime.sleeps) == 45
    assert outcome.passes == 8 and outcome.last_status == "queued"
    assert [o.status for o in sink.observations] == ["queued"] * 8
    assert isinstance(outcome.error(), ProviderDeadlineExceeded)


def test_deadline_already_passed_makes_no_request(
    fake: FakeProvider, poller: BoundedPoller, sink: RecordingSink, ftime: FakeTime
) -> None:
    job_id = fake.add_job([OK])
    outcome = poller.poll(job_id, deadline=ftime.deadline(0), sink=sink)
    assert outcome.outcome is PollOutcomeCode.DEADLINE and outcome.passes == 0
    assert sink.observations == [] and fake.requests == []


def test_repeated_429_with_seconds_is_honoured(
    fake: FakeProvider, poller: BoundedPoller, sink: RecordingSink, ftime: FakeTime
) -> None:
    limited = ("http", 429, {"Retry-After": "3"})
    job_id = fake.add_job([limited, limited, limited, OK])
    deadline = ftime.deadline(60)
    outcome = poller.poll(job_id, deadline=deadline, sink=sink)
    assert outcome.outcome is PollOutcomeCode.SUCCEEDED
    assert ftime.sleeps == [3, 3, 3]
    assert [o.kind for o in sink.observations[:3]] == [ObservationKind.RATE_LIMITED] * 3
    assert all(o.retry_after_s == 3 and o.http_status == 429 for o in sink.observations[:3])
    assert_invariants(outcome, sink, fake, ftime, deadline)


def test_429_retry_after_cap_is_honoured_until_deadline(
    fake: FakeProvider, poller: BoundedPoller, sink: RecordingSink, ftime: FakeTime
) -> None:
    job_id = fake.add_job([("http", 429, {"Retry-After": "100000"})])
    deadline = ftime.deadline(50)
    outcome = poller.poll(job_id, deadline=deadline, sink=sink)
    assert outcome.outcome is PollOutcomeCode.DEADLINE
    assert ftime.sleeps == [20, 20, 10]  # cap 20 s, last wait cut to the deadline
    assert outcome.last_kind is ObservationKind.RATE_LIMITED and outcome.http_status == 429
    assert_invariants(outcome, sink, fake, ftime, deadline)


def test_429_with_http_date_retry_after(
    fake: FakeProvider, poller: BoundedPoller, sink: RecordingSink, ftime: FakeTime
) -> None:
    when = format_datetime(ftime.deadline(7), usegmt=True)
    past = format_datetime(ftime.deadline(-3600), usegmt=True)
    job_id = fake.add_job([("http", 429, {"Retry-After": when}), ("http", 429, {"Retry-After": past}), OK])
    outcome = poller.poll(job_id, deadline=ftime.deadline(60), sink=sink)
    assert outcome.outcome is PollOutcomeCode.SUCCEEDED
    assert ftime.sleeps == [7, 1]  # a date in the past still waits initial_delay_s, never 0


def test_429_without_retry_after_uses_backoff_and_garbage_is_ignored(
    fake: FakeProvider, poller: BoundedPoller, ftime: FakeTime
) -> None:
    job_id = fake.add_job([("http", 429), ("http", 429, {"Retry-After": "soon-ish"}), OK])
    outcome = poller.poll(job_id, deadline=ftime.deadline(60), sink=RecordingSink())
    assert outcome.succeeded and ftime.sleeps == [1, 2]


def test_503_retry_after_is_honoured(fake: FakeProvider, poller: BoundedPoller, ftime: FakeTime) -> None:
    job_id = fake.add_job([("http", 503, {"Retry-After": "5"}), OK])
    assert poller.poll(job_id, deadline=ftime.deadline(60), sink=RecordingSink()).succeeded
    assert ftime.sleeps == [5]


def test_wrong_api_key_is_a_terminal_http_error(fake: FakeProvider, ftime: FakeTime) -> None:
    from docfence.providers import docfence_preset

    config = docfence_preset(fake.base_url, "wrong-key")
    job_id = fake.add_job([OK])
    with ProviderClient(config, clock=ftime.clock) as client:
        poller = BoundedPoller(client, clock=ftime.clock, sleep=ftime.sleep, policy=config.poll)
        outcome = poller.poll(job_id, deadline=ftime.deadline(60), sink=RecordingSink())
    assert outcome.outcome is PollOutcomeCode.PROVIDER_HTTP_ERROR and outcome.http_status == 401
    assert outcome.passes == 1 and ftime.sleeps == []


def test_jitter_only_shortens_waits(fake: FakeProvider, client: ProviderClient, ftime: FakeTime) -> None:
    policy = PollPolicy(initial_delay_s=1, max_delay_s=4, jitter_ratio=0.5)
    poller = BoundedPoller(client, clock=ftime.clock, sleep=ftime.sleep, policy=policy, rng=random.Random(1))
    job_id = fake.add_job([Q])
    poller.poll(job_id, deadline=ftime.deadline(30), sink=RecordingSink())
    nominal = [1, 2, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4]
    for waited, base in zip(ftime.sleeps[:-1], nominal, strict=False):
        assert base * 0.5 <= waited <= base
    assert len(set(ftime.sleeps)) > 3


def test_sink_failure_propagates(fake: FakeProvider, poller: BoundedPoller, ftime: FakeTime) -> None:
    class BrokenSink:
        def record(self, obs: object) -> None:
            raise RuntimeError("store down")

    with pytest.raises(RuntimeError, match="store down"):
        poller.poll(fake.add_job([Q]), deadline=ftime.deadline(60), sink=BrokenSink())


def test_logs_carry_ids_and_outcomes_only(
    fake: FakeProvider,
    client: ProviderClient,
    poller: BoundedPoller,
    ftime: FakeTime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="docfence.providers")
    job_id = client.submit(b"%PDF-secret-body", idempotency_key="k-1", filename="r.pdf")
    fake.set_script(job_id, [("drop",), ("http", 429, {"Retry-After": "1"}), Q, OK])
    outcome = poller.poll(job_id, deadline=ftime.deadline(60), sink=RecordingSink())
    assert outcome.result_url is not None
    client.download_result(outcome.result_url)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert f"provider_job_id={job_id} outcome=succeeded" in text
    for secret in (fake.api_key, "Bearer", "http://", fake.jobs[job_id].signature, "secret-body"):
        assert secret not in text


def test_real_clock_and_sleep_end_at_the_deadline(fake: FakeProvider, config: ProviderConfig) -> None:
    """The production wiring (system clock, real sleep): the poller ends with `deadline` once the
    deadline has passed and never asks to sleep past it. How long that took is not asserted."""
    policy = PollPolicy(initial_delay_s=0.02, max_delay_s=0.05, jitter_ratio=0.1)
    class ReadClock(SystemClock):  # remembers its last reading: the one the poller's wait used
        last: datetime

        def now(self) -> datetime:
            self.last = super().now()
            return self.last

    clock = ReadClock()
    asked: list[tuple[datetime, float]] = []

    def sleep(seconds: float) -> None:
        asked.append((clock.last, seconds))
        time.sleep(seconds)

    job_id = fake.add_job([Q])
    deadline = clock.now() + timedelta(seconds=0.3)
    with ProviderClient(config, timeout_s=30) as client:
        poller = BoundedPoller(client, clock=clock, sleep=sleep, policy=policy)
        outcome = poller.poll(job_id, deadline=deadline, sink=RecordingSink())
    # how many passes fit before the deadline depends on this machine's load: not asserted
    assert outcome.outcome is PollOutcomeCode.DEADLINE and outcome.passes >= len(asked)
    assert clock.now() >= deadline
    assert all(at + timedelta(seconds=s) <= deadline for at, s in asked)
