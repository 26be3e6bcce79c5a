"""The bounded poller: observes one provider job until a terminal outcome or the deadline, reporting
every pass to a sink. Only a running status before the deadline keeps polling; every other answer
ends in a coded outcome, after bounded retries for 5xx/transport errors and malformed answers."""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from docfence.core.clock import Clock
from docfence.core.errors import ProviderError
from docfence.core.states import JobState
from docfence.providers.config import PollPolicy
from docfence.providers.errors import (
    ProviderDeadlineExceeded,
    ProviderHttpError,
    ProviderJobFailed,
    ProviderMalformed,
    ProviderUnavailable,
    ProviderUnknownStatus,
)
from docfence.providers.observation import Observation, ObservationKind, ObservationSink

__all__ = ["BoundedPoller", "ObservationSink", "PollOutcome", "PollOutcomeCode", "StatusSource"]

log = logging.getLogger("docfence.providers")

# A status request started before the deadline may overrun it by at most this much (a shorter
# timeout would turn a slow-but-healthy provider into transport errors).
MIN_REQUEST_TIMEOUT_S = 1.0
_RETRYABLE_HTTP = frozenset({408})  # besides 5xx: request timeout is transient by definition


class PollOutcomeCode(enum.StrEnum):
    """Stable codes for how a poll ended. All but `succeeded` map the application row to failed."""

    SUCCEEDED = "succeeded"
    PROVIDER_FAILED = "provider_failed"  # the provider said failed/canceled
    DEADLINE = "deadline"  # still running (or still retrying) when the deadline came
    PROVIDER_HTTP_ERROR = "provider_http_error"  # a 3xx/4xx (not 408/429) answer to a status request
    PROVIDER_UNAVAILABLE = "provider_unavailable"  # more 5xx/transport errors in a row than allowed
    PROVIDER_MALFORMED = "provider_malformed"  # more malformed answers in a row than allowed
    PROVIDER_UNKNOWN_STATUS = "provider_unknown_status"  # a status value nobody classified


_ERRORS: dict[PollOutcomeCode, type[ProviderError]] = {
    PollOutcomeCode.PROVIDER_FAILED: ProviderJobFailed,
    PollOutcomeCode.DEADLINE: ProviderDeadlineExceeded,
    PollOutcomeCode.PROVIDER_HTTP_ERROR: ProviderHttpError,
    PollOutcomeCode.PROVIDER_UNAVAILABLE: ProviderUnavailable,
    PollOutcomeCode.PROVIDER_MALFORMED: ProviderMalformed,
    PollOutcomeCode.PROVIDER_UNKNOWN_STATUS: ProviderUnknownStatus,
}


class StatusSource(Protocol):
    """What the poller needs from a client (ProviderClient satisfies it)."""

    def observe(self, provider_job_id: str, *, timeout_s: float | None = None) -> Observation: ...


@dataclass(frozen=True)
class PollOutcome:
    """How a poll ended. `last_status` is the most recent status the provider stated (possibly on an
    earlier pass than the last one); `last_observed_at`/`last_kind` describe the last pass. The
    terminal state is SUCCEEDED or FAILED, never a running state. `result_url` is hidden from repr."""

    provider_job_id: str
    outcome: PollOutcomeCode
    terminal_state: JobState
    passes: int
    last_status: str | None = None
    last_observed_at: datetime | None = None
    last_kind: ObservationKind | None = None
    http_status: int | None = None
    reason: str | None = None
    result_url: str | None = field(default=None, repr=False)

    @property
    def succeeded(self) -> bool:
        return self.outcome is PollOutcomeCode.SUCCEEDED

    def error(self) -> ProviderError | None:
        """The coded error to record on the failed row (its message is the safe provider reason, if
        any); None on success."""
        cls = _ERRORS.get(self.outcome)
        if cls is None:
            return None
        return cls(f"{cls().message} ({self.reason})" if self.reason else None)


@dataclass
class _PassState:
    """Mutable bookkeeping of one poll() call."""

    delay: float
    passes: int = 0
    bad_gateway_streak: int = 0  # consecutive 5xx / 408 / transport errors
    malformed_streak: int = 0
    last_status: str | None = None
    last: Observation | None = None


class BoundedPoller:
    """Polls with capped exponential backoff and jitter; never sleeps past the deadline. Exceptions
    raised by the sink (e.g. the store is down) propagate: an unrecorded pass is not a pass."""

    def __init__(
        self,
        client: StatusSource,
        *,
        clock: Clock,
        sleep: Callable[[float], None],
        policy: PollPolicy,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._clock = clock
        self._sleep = sleep
        self._policy = policy
        self._rng = rng or random.Random()

    def poll(self, provider_job_id: str, *, deadline: datetime, sink: ObservationSink) -> PollOutcome:
        """Observe until a terminal outcome; returns `deadline` once the deadline has passed (a
        deadline already in the past means zero passes)."""
        state = _PassState(delay=self._policy.initial_delay_s)
        while (remaining := (deadline - self._clock.now()).total_seconds()) > 0:
            obs = self._client.observe(provider_job_id, timeout_s=max(remaining, MIN_REQUEST_TIMEOUT_S))
            state.passes += 1
            state.last = obs
            state.last_status = obs.status if obs.status is not None else state.last_status
            sink.record(obs)
            log.debug("provider poll pass provider_job_id=%s kind=%s", provider_job_id, obs.kind.value)
            verdict = self._judge(obs, state)
            if isinstance(verdict, PollOutcomeCode):
                return self._finish(provider_job_id, verdict, state)
            self._wait(verdict, deadline)
        return self._finish(provider_job_id, PollOutcomeCode.DEADLINE, state)

    def _judge(self, obs: Observation, state: _PassState) -> PollOutcomeCode | float:
        """A terminal outcome, or how long to wait before the next pass."""
        kind, policy = obs.kind, self._policy
        retryable_http = kind is ObservationKind.TRANSPORT_ERROR or (
            kind is ObservationKind.HTTP_ERROR
            and obs.http_status is not None
            and (obs.http_status >= 500 or obs.http_status in _RETRYABLE_HTTP)
        )
        state.bad_gateway_streak = state.bad_gateway_streak + 1 if retryable_http else 0
        state.malformed_streak = state.malformed_streak + 1 if kind is ObservationKind.MALFORMED else 0
        if kind is ObservationKind.SUCCEEDED:
            return PollOutcomeCode.SUCCEEDED
        if kind is ObservationKind.FAILED:
            return PollOutcomeCode.PROVIDER_FAILED
        if kind is ObservationKind.UNKNOWN_STATUS:
            return PollOutcomeCode.PROVIDER_UNKNOWN_STATUS
        if kind is ObservationKind.HTTP_ERROR and not retryable_http:
            return PollOutcomeCode.PROVIDER_HTTP_ERROR
        if state.bad_gateway_streak > policy.max_consecutive_5xx:
            return PollOutcomeCode.PROVIDER_UNAVAILABLE
        if state.malformed_streak > policy.max_consecutive_malformed:
            return PollOutcomeCode.PROVIDER_MALFORMED
        backoff = self._next_backoff(state)
        if obs.retry_after_s is not None:  # only set on 429 / 5xx answers
            # Honour Retry-After under the cap; never hammer on "Retry-After: 0".
            return min(max(obs.retry_after_s, policy.initial_delay_s), policy.retry_after_cap_s)
        return backoff

    def _next_backoff(self, state: _PassState) -> float:
        """The current backoff with downward jitter; then grow it, capped at max_delay_s."""
        policy = self._policy
        delay = state.delay * (1.0 - policy.jitter_ratio * self._rng.random())
        state.delay = min(state.delay * policy.backoff_factor, policy.max_delay_s)
        return delay

    def _wait(self, delay: float, deadline: datetime) -> None:
        remaining = (deadline - self._clock.now()).total_seconds()
        if remaining > 0:
            self._sleep(min(delay, remaining))

    def _finish(self, provider_job_id: str, code: PollOutcomeCode, state: _PassState) -> PollOutcome:
        last = state.last
        ok = code is PollOutcomeCode.SUCCEEDED
        outcome = PollOutcome(
            provider_job_id=provider_job_id,
            outcome=code,
            terminal_state=JobState.SUCCEEDED if ok else JobState.FAILED,
            passes=state.passes,
            last_status=state.last_status,
            last_observed_at=last.observed_at if last else None,
            last_kind=last.kind if last else None,
            http_status=last.http_status if last else None,
            reason=last.reason if last and code is PollOutcomeCode.PROVIDER_FAILED else None,
            result_url=last.result_url if last and ok else None,
        )
        log.info(
            "provider poll ended provider_job_id=%s outcome=%s passes=%d",
            provider_job_id,
            code.value,
            state.passes,
        )
        return outcome
