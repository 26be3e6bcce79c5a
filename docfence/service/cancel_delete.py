"""Ending a job on a caller's request: cancel (a queued or rendering job), delete (every byte gone,
the metadata kept as a tombstone); both audited with the caller's reason."""

from __future__ import annotations

import re

from docfence.core.access import Principal
from docfence.core.errors import IllegalTransition, InvalidRequest, JobAlreadyEnded
from docfence.core.records import Job
from docfence.core.states import JobState
from docfence.observability import metrics
from docfence.service.base import ServiceState

REASON_CHARS = 200  # a cancel or delete reason, free text kept in the audit event


def check_reason(reason: str | None) -> str | None:
    """A caller's free-text reason, trimmed (None when blank); InvalidRequest names the field when it
    is longer than REASON_CHARS or holds control characters (it is shown in timelines)."""
    if reason is None or not reason.strip():
        return None
    text = reason.strip()
    if len(text) > REASON_CHARS:
        raise InvalidRequest(f"reason: at most {REASON_CHARS} characters (got {len(text)})", field="reason")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise InvalidRequest("reason: control characters (newlines, tabs) are not allowed", field="reason")
    return text


class CancelAndDelete(ServiceState):
    """cancel and delete: a job ended, or removed, at its caller's request."""

    def cancel(self, principal: Principal, job_id: str, *, reason: str | None = None) -> Job:
        """Cancel a queued or rendering job. Cancelling a canceled job again returns it unchanged (the
        caller's wish already holds); a succeeded or failed job raises JobAlreadyEnded (409). `reason`
        (free text, at most REASON_CHARS) is recorded in the audit event as `details.note`."""
        principal.require("jobs.cancel")
        note = check_reason(reason)
        job = self._visible(principal, job_id)
        if not job.terminal:
            try:
                with self._writes:
                    canceled = self.store.cancel(job.id, actor=principal.actor, note=note)
            except IllegalTransition:
                job = self.store.get(job.id)  # it ended between the read and the fenced update
            else:
                metrics.record_terminal(canceled)
                return canceled
        if job.state is JobState.CANCELED:
            return job
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
