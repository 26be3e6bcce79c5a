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
    failed_validation,
    key_fingerprint,
)
from docfence.core.records.reports import (
    ProviderObservation,
    ReportRequest,
    Schedule,
    TemplateInfo,
    TemplateVersion,
)
from docfence.core.records.webhooks import (
    AttemptResult,
    DeliveryClaim,
    WebhookActivity,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)

__all__ = [
    "ApiKey",
    "Artifact",
    "ArtifactInfo",
    "Attempt",
    "AttemptResult",
    "AuditEvent",
    "Claim",
    "ClaimPause",
    "Completion",
    "DeliveryClaim",
    "Job",
    "NewJob",
    "ProviderObservation",
    "ReportRequest",
    "Schedule",
    "TemplateInfo",
    "TemplateVersion",
    "WebhookActivity",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEndpoint",
    "failed_validation",
    "key_fingerprint",
]
