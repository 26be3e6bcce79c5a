"""Report-pipeline records: template versions, report requests, schedules and provider observations.
A template version is immutable; a request belongs to its caller; an observation keeps the last pass."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class TemplateInfo:
    """One immutable template version without its bodies; `owner` is the tenant that owns the template
    id, or None when an operator shared it with every tenant."""

    id: str
    version: int
    name: str
    sha256: str
    created_at: datetime
    created_by: str
    owner: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"


@dataclass(frozen=True)
class TemplateVersion:
    """A template version with its bodies; `assets` maps names to base64 text."""

    info: TemplateInfo
    html: str
    css: str
    assets: dict[str, str]
    schema: dict[str, Any]


@dataclass(frozen=True)
class ReportRequest:
    """Owner: the caller. Unique on (tenant, subject, period, template@version)."""

    id: str
    tenant: str
    subject: str
    period: str
    template_id: str
    template_version: int
    template_sha256: str
    variant: str | None
    document_class: str
    region: str
    retention_until: datetime
    processor: str
    data_sha256: str
    schedule_id: str | None
    created_at: datetime
    created_by: str
    revision: int = 1
    supersedes: str | None = None  # the request this one corrects
    superseded_by: str | None = None  # the correction of this one; None while it is current
    superseded_at: datetime | None = None
    watermark: dict[str, Any] | None = None  # the caller's watermark fields (None: the class's)

    @property
    def current(self) -> bool:
        return self.superseded_by is None


@dataclass(frozen=True)
class Schedule:
    """"template X@v, monthly on day D": the run on day D of month M requests period M-1."""

    id: str
    tenant: str
    subject: str
    template_id: str
    template_version: int
    day_of_month: int
    catch_up_periods: int
    variant: str | None
    document_class: str
    processor: str
    last_period: str | None
    created_at: datetime
    created_by: str


@dataclass(frozen=True)
class ProviderObservation:
    """The last pass of a provider-rendered job: last stated status and when the last pass happened."""

    job_id: str
    attempt: int
    provider: str
    provider_job_id: str | None
    status: str | None
    kind: str
    http_status: int | None
    reason: str | None
    observed_at: datetime
    passes: int
    outcome: str | None
