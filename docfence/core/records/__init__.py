"""Records: frozen snapshots of what the store holds, one module per pipeline (jobs, reports, webhooks).
Each has one owner and one deletion rule. `from docfence.core.records import X` works for every record."""

from docfence.core.records.jobs import (
    ApiKey,
    Artifact,
    ArtifactInfo,
    Attempt,
    AuditEvent,
    Claim,
    ClaimPause,
    Completion,
    Job,
    NewJob,
)

__all__ = [
    "ApiKey", "Artifact", "ArtifactInfo", "Attempt", "AuditEvent", "Claim", "ClaimPause", "Completion",
    "Job", "NewJob",
]
