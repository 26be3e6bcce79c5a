"""Fixtures for provider tests: a loopback fake provider, a fake clock whose sleep advances time."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from docfence.core.clock import FakeClock
from docfence.providers import (
    BoundedPoller,
    Observation,
    PollPolicy,
    ProviderClient,
    ProviderConfig,
    docfence_preset,
)
from docfence.testing.fake_provider import FakeProvider

FAST = PollPolicy(
    initial_delay_s=1.0,
    max_delay_s=8.0,
    backoff_factor=2.0,
    jitter_ratio=0.0,
    retry_after_cap_s=20.0,
    max_consecutive_5xx=3,
    max_consecutive_malformed=1,
)


@dataclass
class RecordingSink:
    observations: list[Observation] = field(default_factory=list)

    def record(self, obs: Observation) -> None:
        self.observations.append(obs)


@dataclass
class FakeTime:
    """A FakeClock plus a sleep that advances it and remembers every wait."""

    clock: FakeClock = field(default_factory=FakeClock)
    sleeps: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.clock.advance(seconds)

    def deadline(self, seconds: float) -> datetime:
        return self.clock.now() + timedelta(seconds=seconds)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


@pytest.fixture
def ftime() -> FakeTime:
    return FakeTime()


@pytest.fixture
def config(fake: FakeProvider) -> ProviderConfig:
    return docfence_preset(fake.base_url, fake.api_key, poll=FAST)


@pytest.fixture
def client(config: ProviderConfig, ftime: FakeTime) -> Iterator[ProviderClient]:
    with ProviderClient(config, timeout_s=5, clock=ftime.clock, sleep=ftime.sleep) as c:
        yield c


@pytest.fixture
def poller(client: ProviderClient, ftime: FakeTime) -> BoundedPoller:
    return BoundedPoller(client, clock=ftime.clock, sleep=ftime.sleep, policy=FAST, rng=random.Random(7))


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()
