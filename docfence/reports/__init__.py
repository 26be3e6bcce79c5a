"""The report pipeline's use cases: immutable template versions, idempotent report requests (with
operator retries), the monthly scheduler and the dispatcher of provider-rendered jobs."""

from docfence.core.records import (
    ProviderObservation,
    ReportRequest,
    Schedule,
    TemplateInfo,
    TemplateVersion,
)
from docfence.reports.requests import ReportRequests, RequestDetail, RequestSpec, parse_template_ref
from docfence.reports.templates import Templates

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
