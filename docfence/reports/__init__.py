"""The report pipeline's use cases: immutable template versions, idempotent report requests (with
operator retries), the monthly scheduler and the dispatcher of provider-rendered jobs."""

from docfence.reports.requests import ReportRequests, RequestDetail, RequestSpec, parse_template_ref
from docfence.reports.templates import Templates
from docfence.store.reports import (
    ProviderObservation,
    ReportRequest,
    Schedule,
    TemplateInfo,
    TemplateVersion,
)

__all__ = [
    "ProviderObservation",
    "ReportRequest",
    "ReportRequests",
    "RequestDetail",
    "RequestSpec",
    "Schedule",
    "TemplateInfo",
    "TemplateVersion",
    "Templates",
    "parse_template_ref",
]
