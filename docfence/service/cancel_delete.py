"""Ending a job on a caller's request: cancel (a queued or rendering job, one or a confirmed list),
delete (every byte gone, the metadata kept as a tombstone); each audited with the caller's reason."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from docfence.core.access import REASON_CHARS, Principal, check_reason
from docfence.core.errors import (
    IllegalTransition,
    InvalidRequest,
    JobAlreadyEnded,
    NotFound,
    StaleAttempt,
)
from docfence.core.records import Job
from docfence.core.states import JobState
from docfence.observability import metrics
from docfence.service.base import ServiceState

__all__ = ["REASON_CHARS", "CancelAndDelete", "CancelMany", "check_reason"]  # the reason's rule lives in core


@dataclass(frozen=True)
class CancelMany:
    """What `cancel_many` did: the ids this call canceled, and per skipped id why (`ended`: it ended
    before its turn, as `state`; `not_found`: missing, or not this key's to see; `busy`: it kept
    changing under the fenced update)."""

    canceled: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)


class CancelAndDelete(ServiceState):
    """cancel and delete: a job ended, or removed, at its caller's request."""

    def cancel(self, principal: Principal, job_id: str, *, reason: str | None = None) -> Job:
        """Cancel a queued or rendering job. Cancelling a canceled job again returns it unchanged (the
        caller's wish already holds); a succeeded or failed job raises JobAlreadyEnded (409). `reason`
        (free text, at most REASON_CHARS) is recorded in the audit event as `details.note`; an operator
        may cancel every tenant's jobs and must give one (InvalidRequest naming `reason`)."""
        principal.require("jobs.cancel")
        return self._cancel(principal, job_id, principal.reason_for(reason))[0]

    def cancel_many(self, principal: Principal, job_ids: Sequence[str], *, reason: str | None) -> CancelMany:
        """Cancel exactly these jobs (a list the caller confirmed, e.g. the console's bulk preview),
        one by one as `cancel` does: each checked against the key's reach and audited with `reason`,
        which is required. Nothing else is touched, so a job submitted after the list was made is
        never swept in; an id that ended meanwhile or is not this key's to see is reported skipped."""
        principal.require("jobs.cancel")
        note = principal.reason_for(reason)
        if note is None:
            raise InvalidRequest("reason: say why these jobs are canceled (recorded in each audit event)",
                                 field="reason")
        done = CancelMany()
        for job_id in dict.fromkeys(job_ids):
            try:
                job, mine = self._cancel(principal, job_id, note)
            except NotFound:
                done.skipped.append({"id": job_id, "why": "not_found"})
            except JobAlreadyEnded:
                ended = self.store.get(job_id).state.value
                done.skipped.append({"id": job_id, "why": "ended", "state": ended})
            except StaleAttempt:
                done.skipped.append({"id": job_id, "why": "busy"})
            else:
                if mine:
                    done.canceled.append(job.id)
                else:
                    done.skipped.append({"id": job.id, "why": "ended", "state": job.state.value})
        return done

    def _cancel(self, principal: Principal, job_id: str, note: str | None) -> tuple[Job, bool]:
        """(the job, whether this call canceled it). Raises NotFound beyond the key's reach,
        JobAlreadyEnded when it succeeded or failed, StaleAttempt when it kept changing."""
        job = self._visible(principal, job_id, acting=True)
        if not job.terminal:
            try:
                with self._writes:
                    canceled = self.store.cancel(job.id, actor=principal.actor, note=note)
            except IllegalTransition:
                job = self.store.get(job.id)  # it ended between the read and the fenced update
            else:
                metrics.record_terminal(canceled)
                return canceled, True
        if job.state is JobState.CANCELED:
            return job, False
        raise JobAlreadyEnded(f"job {job.id} already ended as {job.state.value}; there is nothing to cancel")

    def delete(self, principal: Principal, job_id: str, request_id: str, *, reason: str | None = None) -> Job:
        """Remove every byte of the job (input, all attempts, artifact) and keep its metadata as a
        tombstone; a running attempt is canceled first. Needs the tenant admin (jobs.delete); audited
        with who asked, the request id and the free-text `reason` (`details.note`)."""
        from docfence.maintenance.deletion import DeletionService

        principal.require("jobs.delete")
        note = check_reason(reason)
        job = self._visible(principal, job_id)
        if not re.fullmatch(r"[A-Za-z0-9._:-]{1,128}", request_id):
            raise InvalidRequest("the deletion request id must be 1-128 letters, digits or ._:-",
                                 field="request_id")
        with self._writes:
            DeletionService(self.store, self.router).delete_job(
                job.id, actor=principal.actor, request_id=request_id, note=note)
        return self.store.get(job.id)
