"""Job states and the closed transition table: the one module that owns the state machine.

Every state change in docfence is one of the named transitions below; stores enforce them with
fenced predicates and reject everything else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class JobState(enum.StrEnum):
    QUEUED = "queued"
    """Waiting for a worker. In: submit, retryable error, expired lease. Out: claim, deadline, cancel."""
    RENDERING = "rendering"
    """One attempt holds a lease. In: claim. Out: commit, permanent/retryable error, lease expiry,
    deadline, cancel."""
    SUCCEEDED = "succeeded"
    """Terminal: the artifact of the current attempt is committed. In: fenced commit. Out: never."""
    FAILED = "failed"
    """Terminal: permanent error or attempts exhausted. In: worker or reconciler. Out: never."""
    CANCELED = "canceled"
    """Terminal: deadline reached or cancel requested. In: reconciler or caller. Out: never."""

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED})
ACTIVE_STATES = frozenset({JobState.QUEUED, JobState.RENDERING})


class Event(enum.StrEnum):
    """What happened; the reason code recorded on each audit event of a transition."""

    SUBMITTED = "submitted"
    LEASE_ACQUIRED = "lease_acquired"
    ARTIFACT_COMMITTED = "artifact_committed"
    PERMANENT_ERROR = "permanent_error"
    RETRYABLE_ERROR = "retryable_error"
    RETRIES_EXHAUSTED = "retries_exhausted"
    LEASE_EXPIRED = "lease_expired"
    LEASE_EXPIRED_EXHAUSTED = "lease_expired_exhausted"
    LEASE_RELEASED = "lease_released"
    DEADLINE_REACHED = "deadline_reached"
    CANCEL_REQUESTED = "cancel_requested"


@dataclass(frozen=True)
class Transition:
    """One row of the table: `event` moves a job from `source` to `target` (attempt + 1 when
    `bumps_attempt`) through the store query named `query`, the same name in every dialect
    (docfence/store/queries/<dialect>/transitions.sql). Stores take target, attempt bump and the
    audit event's from/to/reason from this row."""

    event: Event
    source: JobState | None  # None: the job is created by this transition
    target: JobState
    query: str
    bumps_attempt: bool = False


_Q, _R = JobState.QUEUED, JobState.RENDERING
_S, _F, _C = JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED

#: The closed table. Anything not listed here never happens.
TRANSITIONS: tuple[Transition, ...] = (
    Transition(Event.SUBMITTED, None, _Q, "submitted"),
    Transition(Event.LEASE_ACQUIRED, _Q, _R, "lease_acquired", bumps_attempt=True),
    Transition(Event.ARTIFACT_COMMITTED, _R, _S, "artifact_committed"),
    Transition(Event.PERMANENT_ERROR, _R, _F, "error_reported"),
    Transition(Event.RETRYABLE_ERROR, _R, _Q, "error_reported"),
    Transition(Event.RETRIES_EXHAUSTED, _R, _F, "error_reported"),  # a retryable error, no attempt left
    Transition(Event.LEASE_EXPIRED, _R, _Q, "lease_expired"),
    Transition(Event.LEASE_EXPIRED_EXHAUSTED, _R, _F, "lease_expired"),
    Transition(Event.LEASE_RELEASED, _R, _Q, "lease_released"),  # graceful shutdown hands the lease back
    Transition(Event.DEADLINE_REACHED, _Q, _C, "deadline_reached"),
    Transition(Event.DEADLINE_REACHED, _R, _C, "deadline_reached"),
    Transition(Event.CANCEL_REQUESTED, _Q, _C, "cancel_requested"),
    Transition(Event.CANCEL_REQUESTED, _R, _C, "cancel_requested"),
)

_BY_KEY = {(t.event, t.source): t for t in TRANSITIONS}
ALLOWED_PAIRS = frozenset((t.source, t.target) for t in TRANSITIONS)


def transition(event: Event, source: JobState | None) -> Transition:
    """Return the table row for `event` from `source`; raises IllegalTransition otherwise."""
    from docfence.core.errors import IllegalTransition

    try:
        return _BY_KEY[(event, source)]
    except KeyError:
        src = source.value if source else "nothing"
        raise IllegalTransition(f"{event.value} is not allowed from {src}") from None

