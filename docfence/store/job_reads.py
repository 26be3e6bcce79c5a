"""The read side of jobs in the SQL stores: one job, filtered lists, counts by state, a job's attempts,
artifact and audit trail (a mixin of SqlStore; it never writes)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from docfence.core.errors import NotFound
from docfence.core.records import Artifact, Attempt, AuditEvent, Job
from docfence.core.states import JobState
from docfence.store.sqlbase import SqlBase, _json, known_fields


class JobReads(SqlBase):
    """Reads of jobs and their evidence, each in one read-only transaction."""

    def get(self, job_id: str) -> Job:
        with self._tx(write=False) as tx:
            row = tx.one("get_job", id=job_id)
        if row is None:
            raise NotFound(f"no job {job_id}")
        return self._job(row)

    def list_jobs(
        self, *, state: JobState | None = None, tenant: str | None = None, mode: str | None = None,
        document_class: str | None = None, created_before: datetime | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None, created_after: datetime | None = None,
        label: str | None = None, filename: str | None = None,
    ) -> list[Job]:
        """Newest first. `after` is a keyset cursor, the (created_at, id) of the last job of the
        previous page: the next page starts strictly after it, stable under inserts. Creation range:
        `created_after` <= created_at < `created_before`; `label` and `filename` match exactly."""
        after_at, after_id = after if after else (None, None)
        with self._tx(write=False) as tx:
            rows = tx.all("list_jobs", state=state.value if state else None, tenant=tenant, mode=mode,
                          document_class=document_class, created_before=created_before, limit=limit,
                          after_at=after_at, after_id=after_id, created_after=created_after,
                          label=label, filename=filename)
        return [self._job(r) for r in rows]

    def count_by_state(self) -> dict[str, int]:
        counts = {s.value: 0 for s in JobState}
        with self._tx(write=False) as tx:
            for row in tx.all("count_by_state"):
                counts[row["state"]] = int(row["n"])
        return counts

    def attempts(self, job_id: str) -> list[Attempt]:
        with self._tx(write=False) as tx:
            rows = tx.all("list_attempts", job_id=job_id)
        return [Attempt(**known_fields(Attempt, r)) for r in rows]

    def artifact(self, job_id: str) -> Artifact | None:
        with self._tx(write=False) as tx:
            row = tx.one("get_artifact", job_id=job_id)
        if row is None:
            return None
        row["key"] = row.pop("storage_key")
        row["validation"] = _json(row["validation"])
        return Artifact(**known_fields(Artifact, row))

    def audit_events(self, job_id: str) -> list[AuditEvent]:
        with self._tx(write=False) as tx:
            return [self._event(r) for r in tx.all("list_audit_for_job", job_id=job_id)]

    def audit_trail(self, *, after_seq: int = 0, limit: int = 1000) -> list[AuditEvent]:
        with self._tx(write=False) as tx:
            return [self._event(r) for r in tx.all("list_audit", after_seq=after_seq, limit=limit)]

    def iter_audit(self, *, page: int = 1000) -> Iterator[AuditEvent]:
        after = 0
        while True:
            events = self.audit_trail(after_seq=after, limit=page)
            yield from events
            if len(events) < page:
                return
            after = events[-1].seq

    def audit_heads(self) -> dict[str, tuple[int, str]]:
        with self._tx(write=False) as tx:
            return {r["chain"]: (int(r["seq"]), r["hash"]) for r in tx.all("list_chain_heads")}
