"""Report pipeline routes: template versions, report requests (idempotent create, read, retry) and
schedules. Handlers call docfence.reports use cases; tenants see only their own requests and schedules."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, Field, WithJsonSchema

from docfence.api.deps import (
    ReportsRead,
    ReportsRequest,
    ReportsRetry,
    SchedulesRead,
    SchedulesWrite,
    ServiceDep,
    TemplatesRead,
    TemplatesWrite,
)
from docfence.api.errors import error_responses
from docfence.api.gate import BODY_CAP_KEY
from docfence.api.jobs import Reason
from docfence.api.wire import JobOut, Matches, configured, job_out, mark_schema
from docfence.core.policy import MAX_IMAGE_CHARS
from docfence.reports import (
    ProviderObservation,
    ReportRequests,
    RequestDetail,
    RequestSpec,
    Schedule,
    TemplateInfo,
    Templates,
)
from docfence.reports.requests import PERIOD_FORMS, SUBJECT_PATTERN, SUBJECT_RULE
from docfence.reports.scheduler import add_schedule
from docfence.reports.templates import MAX_TEMPLATE_BYTES
from docfence.service import Service

router = APIRouter(prefix="/v1", tags=["reports"])
Id = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
Variant = Literal["pdf/a-3b", "pdf/ua-1"] | None
# The rules docfence.reports checks (parse_template_ref, check_period; check_subject's pattern is its
# own), as the JSON Schema patterns the API enforces first; tests/api/test_openapi_conformance.py proves
# they agree.
TEMPLATE_REF = r"^[a-z0-9][a-z0-9_-]{0,63}@[1-9][0-9]{0,8}$"
_DAY31, _DAY30, _DAY29 = r"(?:0[1-9]|[12][0-9]|3[01])", r"(?:0[1-9]|[12][0-9]|30)", r"(?:0[1-9]|[12][0-9])"
#: YYYY, YYYY-Hn, YYYY-Qn, YYYY-Www, YYYY-MM, YYYY-MM-DD with real months and days; a year from 0001.
#: What no pattern says: 29 February outside leap years and week 53 of a 52-week year (refused).
PERIOD = (r"^(?!0000)[0-9]{4}(?:-H[12]|-Q[1-4]|-W(?:0[1-9]|[1-4][0-9]|5[0-3])|"
          rf"-(?:(?:0[13578]|1[02])(?:-{_DAY31})?|(?:0[469]|11)(?:-{_DAY30})?|02(?:-{_DAY29})?))?$")
#: Base64 as the service decodes it (validate=True: the standard alphabet, padded).
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
#: A report's watermark may carry its logo itself, as a PNG or SVG data URI.
_REPORT_MARK = mark_schema({"anyOf": [{"type": "string", "maxLength": MAX_IMAGE_CHARS,
                                       "pattern": r"^data:image/(?:png|svg\+xml);base64,"},
                                      {"type": "null"}]})
ClassName = Annotated[str | None, WithJsonSchema({"anyOf": [configured("document_class"), {"type": "null"}]})]
Processor = Annotated[str, WithJsonSchema({**configured("processor"), "default": "local"})]
ReportMark = Annotated[dict[str, Any] | None, WithJsonSchema({"anyOf": [_REPORT_MARK, {"type": "null"}]})]
Subject = Annotated[str, Matches(f"^{SUBJECT_PATTERN}$", SUBJECT_RULE)]
TemplateRef = Annotated[str, Matches(TEMPLATE_REF, "template must be written id@version, for example "
                                                   "monthly@3")]


# -- wire models -----------------------------------------------------------------------------------------
class TemplateIn(BaseModel):
    id: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    name: str | None = Field(default=None, max_length=200)
    html: str
    css: str = ""
    assets: dict[str, Annotated[str, Matches(BASE64, "assets must map names to base64 text"),
                                Field(json_schema_extra={"format": "byte"})]] = Field(
        default_factory=dict, description="name -> base64 bytes")
    json_schema: dict[str, Any] = Field(alias="schema", description="JSON Schema (Draft 2020-12) of the data")


class TemplateOut(BaseModel):
    id: str
    version: int
    ref: str
    name: str
    sha256: str
    created_at: datetime
    created_by: str
    shared: bool = Field(description="Published by an operator for every tenant (else: the caller's own)")


class TemplateDetailOut(TemplateOut):
    html: str
    css: str
    asset_names: list[str]
    json_schema: dict[str, Any] = Field(serialization_alias="schema")


class ReportRequestIn(BaseModel):
    subject: Subject = Field(min_length=1, max_length=128)
    period: Annotated[str, Matches(PERIOD, f"must be {PERIOD_FORMS}")] = Field(
        min_length=1, max_length=32, description=PERIOD_FORMS)
    template: TemplateRef = Field(min_length=3, max_length=80, description="id@version")
    data: dict[str, Any] = Field(description="Checked against the template version's own JSON Schema")
    variant: Variant = None
    document_class: ClassName = Field(default=None, max_length=64)
    processor: Processor = Field(default="local", max_length=64)
    watermark: ReportMark = Field(default=None,
                                  description="WatermarkSpec fields over the document class's watermark")
    supersede: bool = Field(default=False, description=(
        "Replace the current request of this subject, period and template@version (whose job ended) by "
        "this one with corrected data; the old request and its jobs stay as evidence"))


class ObservationOut(BaseModel):
    """The last pass of a provider-rendered job: last stated status and when it was observed."""

    job_id: str
    attempt: int
    provider: str
    provider_job_id: str | None
    status: str | None
    kind: str
    http_status: int | None
    observed_at: datetime
    passes: int
    outcome: str | None


class ReportRequestOut(BaseModel):
    id: str
    tenant: str
    subject: str
    period: str
    template: str
    template_sha256: str
    variant: str | None
    region: str
    retention_until: datetime
    processor: str
    data_sha256: str
    schedule_id: str | None
    created_at: datetime
    revision: int = Field(description="1, or one more than the request it supersedes")
    supersedes: str | None = Field(description="The request this one corrects")
    superseded_by: str | None = Field(description="The request that corrected this one (None while current)")
    watermark: dict[str, Any] | None
    state: str
    jobs: list[JobOut]
    provider_observation: ObservationOut | None


class ScheduleIn(BaseModel):
    subject: Subject = Field(min_length=1, max_length=128)
    template: TemplateRef = Field(min_length=3, max_length=80, description="id@version")
    day_of_month: int = Field(default=1, ge=1, le=28)
    catch_up_periods: int = Field(default=3, ge=0, le=24)
    variant: Variant = None
    document_class: ClassName = Field(default=None, max_length=64)
    processor: Processor = Field(default="local", max_length=64)
    start_period: str | None = Field(default=None, pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])$")


class ScheduleOut(BaseModel):
    id: str
    subject: str
    template: str
    day_of_month: int
    catch_up_periods: int
    variant: str | None
    processor: str
    last_period: str | None
    created_at: datetime


# -- builders -------------------------------------------------------------------------------------------
def _template_out(info: TemplateInfo) -> TemplateOut:
    return TemplateOut(id=info.id, version=info.version, ref=info.ref, name=info.name, sha256=info.sha256,
                       created_at=info.created_at, created_by=info.created_by, shared=info.owner is None)


def _observation_out(obs: ProviderObservation | None) -> ObservationOut | None:
    if obs is None:
        return None
    return ObservationOut(job_id=obs.job_id, attempt=obs.attempt, provider=obs.provider,
                          provider_job_id=obs.provider_job_id, status=obs.status, kind=obs.kind,
                          http_status=obs.http_status, observed_at=obs.observed_at, passes=obs.passes,
                          outcome=obs.outcome)


def _request_out(service: Service, detail: RequestDetail) -> ReportRequestOut:
    r = detail.request
    return ReportRequestOut(
        id=r.id, tenant=r.tenant, subject=r.subject, period=r.period,
        template=f"{r.template_id}@{r.template_version}", template_sha256=r.template_sha256,
        variant=r.variant, region=r.region, retention_until=r.retention_until, processor=r.processor,
        data_sha256=r.data_sha256, schedule_id=r.schedule_id, created_at=r.created_at, revision=r.revision,
        supersedes=r.supersedes, superseded_by=r.superseded_by, watermark=r.watermark, state=detail.state,
        jobs=[job_out(service.describe(job)) for job in detail.jobs],
        provider_observation=_observation_out(detail.observation),
    )


def _schedule_out(s: Schedule) -> ScheduleOut:
    return ScheduleOut(id=s.id, subject=s.subject, template=f"{s.template_id}@{s.template_version}",
                       day_of_month=s.day_of_month, catch_up_periods=s.catch_up_periods, variant=s.variant,
                       processor=s.processor, last_period=s.last_period, created_at=s.created_at)


def _requests(request: Request, service: Service) -> ReportRequests:
    """The use cases; `app.state.report_processors` names the configured providers (default: none)."""
    processors = getattr(request.app.state, "report_processors", ())
    return ReportRequests(service.settings, service.store, service.router, processors=processors,
                          clock=service.clock, job_keys=service.job_keys)


# -- templates ------------------------------------------------------------------------------------------
#: A template bundle may hold MAX_TEMPLATE_BYTES of files, which travel base64-encoded in JSON.
TEMPLATE_BODY_CAP = MAX_TEMPLATE_BYTES * 4 // 3 + 1024 * 1024


@router.post("/templates", status_code=201, response_model=TemplateOut,
             responses={200: {"model": TemplateOut, "description": "Identical to the newest version"},
                        **error_responses(400, 401, 403, 409, 413, 422)},
             openapi_extra={BODY_CAP_KEY: TEMPLATE_BODY_CAP})
def create_template_version(body: TemplateIn, response: Response, service: ServiceDep,
                            principal: TemplatesWrite) -> TemplateOut:
    """Create the next version of a template. A tenant admin publishes its tenant's templates; an
    operator publishes templates shared with every tenant. Versions are immutable; identical content
    returns the newest version (200); an id owned by someone else is 409 template_id_taken."""
    info, created = Templates(service.store).create_from_parts(
        body.id, name=body.name, html=body.html, css=body.css, assets_b64=body.assets,
        schema=body.json_schema, actor=principal.actor, owner=principal.template_owner,
    )
    if not created:
        response.status_code = 200
    return _template_out(info)


@router.get("/templates", response_model=list[TemplateOut], responses=error_responses(400, 401, 403, 422))
def list_templates(service: ServiceDep, principal: TemplatesRead,
                   id: Annotated[str | None, Query(max_length=64)] = None) -> list[TemplateOut]:
    """The caller's own templates and the shared ones."""
    infos = Templates(service.store).list(id, visible_to=principal.template_owner)
    return [_template_out(info) for info in infos]


@router.get("/templates/{template_id}/versions/{version}", response_model=TemplateDetailOut,
            responses=error_responses(400, 401, 403, 404, 422))
def get_template_version(template_id: Id, version: Annotated[int, Path(ge=1, le=2**31 - 1)],
                         service: ServiceDep, principal: TemplatesRead) -> TemplateDetailOut:
    """One version of the caller's own or a shared template (another tenant's answers 404)."""
    tv = Templates(service.store).get(template_id, version, visible_to=principal.template_owner)
    return TemplateDetailOut(**_template_out(tv.info).model_dump(), html=tv.html, css=tv.css,
                             asset_names=sorted(tv.assets), json_schema=tv.schema)


# -- report requests ---------------------------------------------------------------------------------------
@router.post("/report-requests", status_code=201, response_model=ReportRequestOut,
             responses={200: {"model": ReportRequestOut, "description": "The same request, created earlier"},
                        **error_responses(400, 401, 403, 404, 409, 422)})
def create_report_request(body: ReportRequestIn, request: Request, response: Response, service: ServiceDep,
                          principal: ReportsRequest) -> ReportRequestOut:
    """Create a report request (one per subject, period and template@version) and its job. The template
    must be the caller's own or shared (another tenant's answers 404). The data is checked against the
    template's schema (400 invalid_report_data naming the failing path). Other data for an existing
    request is 409 unless `supersede` is true: then a corrected request replaces it (201)."""
    spec = RequestSpec(tenant=principal.tenant, subject=body.subject, period=body.period,
                       template=body.template, data=body.data, variant=body.variant,
                       document_class=body.document_class, processor=body.processor,
                       watermark=body.watermark, supersede=body.supersede)
    detail, created = _requests(request, service).create(spec, actor=principal.actor)
    if not created:
        response.status_code = 200
    response.headers["Location"] = f"/v1/report-requests/{detail.request.id}"
    return _request_out(service, detail)


@router.get("/report-requests/{request_id}", response_model=ReportRequestOut,
            responses=error_responses(400, 401, 403, 404, 422))
def get_report_request(request_id: Id, request: Request, service: ServiceDep,
                       principal: ReportsRead) -> ReportRequestOut:
    """The request with its jobs (oldest first) and the newest job's last provider observation."""
    return _request_out(service, _requests(request, service).get(request_id, tenant=principal.tenant))


@router.post("/report-requests/{request_id}/retry", status_code=201, response_model=JobOut,
             responses=error_responses(400, 401, 403, 404, 409, 422))
def retry_report_request(request_id: Id, request: Request, service: ServiceDep,
                         principal: ReportsRetry, reason: Reason = None) -> JobOut:
    """A new job linked to the failed (or canceled) newest one; 409 illegal_transition while that job
    is active, 409 retry_would_fail when it failed the way every retry would (the message says what to
    do instead). An operator retries every tenant's requests and must give a `reason`; a reason is
    audited on the new job (`retry_requested`, `details.note`)."""
    job = _requests(request, service).retry(request_id, actor=principal.actor, tenant=principal.tenant_view,
                                            reason=principal.reason_for(reason))
    return job_out(service.describe(job))


# -- schedules ---------------------------------------------------------------------------------------------
@router.post("/schedules", status_code=201, response_model=ScheduleOut,
             responses={200: {"model": ScheduleOut, "description": "The existing schedule"},
                        **error_responses(400, 401, 403, 404, 422)})
def create_schedule(body: ScheduleIn, request: Request, response: Response, service: ServiceDep,
                    principal: SchedulesWrite) -> ScheduleOut:
    """Schedule a template monthly: on day D of month M the scheduler requests period M-1."""
    schedule, created = add_schedule(
        _requests(request, service), tenant=principal.tenant, subject=body.subject, template=body.template,
        day_of_month=body.day_of_month, catch_up_periods=body.catch_up_periods, variant=body.variant,
        document_class=body.document_class, processor=body.processor, start_period=body.start_period,
        actor=principal.actor,
    )
    if not created:
        response.status_code = 200
    return _schedule_out(schedule)


@router.get("/schedules", response_model=list[ScheduleOut], responses=error_responses(400, 401, 403))
def list_schedules(request: Request, service: ServiceDep, principal: SchedulesRead) -> list[ScheduleOut]:
    return [_schedule_out(s) for s in _requests(request, service).store.list_schedules(principal.tenant)]
