"""Report requests: create idempotently (one request per tenant, subject, period and template@version, with
exactly one initial job, its snapshot sealed under the job's own data key), read with their jobs, and
retries (a new job linked to the failed one), refused when the failure would repeat (`retry_candidate`)."""

from __future__ import annotations

import calendar
import functools
import hashlib
import json
import logging
import os
import re
import resource
import signal
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol

from docfence import storage_keys
from docfence.blobs import RegionRouter
from docfence.blobs.kek.jobs import JobKeys, RowKey, put_object, read_object
from docfence.config import Settings
from docfence.core.access import check_reason, check_tenant
from docfence.core.clock import Clock, SystemClock
from docfence.core.errors import (
    ConfigError,
    DocumentError,
    IdempotencyConflict,
    IllegalTransition,
    InternalError,
    InvalidReportData,
    InvalidRequest,
    InvalidWatermark,
    NotFound,
    RenderResourceExceeded,
    RetryWouldFail,
    TemplateDataInvalid,
    TemplateError,
)
from docfence.core.ids import new_id
from docfence.core.marks import resolve_fields
from docfence.core.policy import JobPolicy, Kind, Mode, WatermarkSpec
from docfence.core.records import Job, NewJob, ProviderObservation, ReportRequest, TemplateVersion
from docfence.core.states import JobState
from docfence.engines.parallel import Forked
from docfence.engines.report.data import validate_data
from docfence.engines.report.render import VARIANTS
from docfence.reports.templates import check_template_id
from docfence.sandbox.report_job import build_snapshot
from docfence.store.base import AuditLog, JobStore, ProviderStore, ReportStore


class RequestStore(ReportStore, JobStore, ProviderStore, AuditLog, Protocol):
    """What report requests use: templates and requests, job submission, provider observations, and the
    audit trail (a retry's reason)."""


log = logging.getLogger(__name__)

LOCAL_PROCESSOR = "local"
#: The one syntax of a report's `subject`, wherever it enters (API, CLI, schedules): it is a single
#: path segment (no "/", never "." or ".."), so a folder named after it stays inside its tenant's.
SUBJECT_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
SUBJECT_RULE = "subject must match [A-Za-z0-9][A-Za-z0-9._:-]* (at most 128 characters)"
_SUBJECT_RE = re.compile(SUBJECT_PATTERN)
#: Period keys: a year, half, quarter, ISO week, month or day (the scheduler writes months).
_PERIOD_RE = re.compile(r"(?P<y>[0-9]{4})(?:-H(?P<h>[12])|-Q(?P<q>[1-4])|-W(?P<w>[0-9]{2})|"
                        r"-(?P<m>[0-9]{2})(?:-(?P<d>[0-9]{2}))?)?")
PERIOD_FORMS = "YYYY-MM (e.g. 2026-11), YYYY-MM-DD, YYYY-Www, YYYY-Qn, YYYY-Hn or YYYY"
_REF_RE = re.compile(r"([a-z0-9][a-z0-9_-]{0,63})@([1-9][0-9]{0,8})")


def parse_template_ref(ref: str) -> tuple[str, int]:
    """"monthly@3" -> ("monthly", 3); raises InvalidRequest."""
    match = _REF_RE.fullmatch(ref or "")
    if match is None:
        raise InvalidRequest("template must be written id@version, for example monthly@3")
    return match.group(1), int(match.group(2))


@dataclass(frozen=True)
class RequestSpec:
    """What a caller (or the scheduler) asks for. `processor` is "local" or a configured provider."""

    tenant: str
    subject: str
    period: str
    template: str  # id@version
    data: dict[str, Any] = field(default_factory=dict)
    variant: str | None = None
    document_class: str | None = None
    processor: str = LOCAL_PROCESSOR
    schedule_id: str | None = None
    watermark: Mapping[str, Any] | None = None  # fields over the class's watermark spec
    supersede: bool = False  # replace the current request of this subject/period/template by this one


@dataclass(frozen=True)
class RequestDetail:
    """A request with its jobs (oldest first) and the last provider observation of its newest job."""

    request: ReportRequest
    jobs: list[Job]
    observation: ProviderObservation | None = None

    @property
    def state(self) -> str:
        """The newest job's state ("pending" before its first job exists)."""
        return self.jobs[-1].state.value if self.jobs else "pending"


def data_sha256(data: dict[str, Any]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ReportRequests:
    """Report-request use cases; `processors` are the configured provider names besides "local";
    `clock` dates the jobs' `{date}` and `{datetime}` fields (the service's clock); `job_keys` gives
    each job its data key (default: from [encryption], the key provider opened on first use)."""

    def __init__(self, settings: Settings, store: RequestStore, router: RegionRouter, *,
                 processors: Collection[str] = (), clock: Clock | None = None,
                 job_keys: JobKeys | None = None) -> None:
        self.settings, self.store, self.router = settings, store, router
        self.clock: Clock = clock or SystemClock()
        self.keys = job_keys or JobKeys(settings.encryption, settings.data_folder())
        self.processors = frozenset(processors) | {LOCAL_PROCESSOR}

    def create(self, spec: RequestSpec, *, actor: str) -> tuple[RequestDetail, bool]:
        """(detail, created). Creating the same request again returns it (and its one initial job).

        The data is checked against the template's JSON Schema here, before anything is stored. With
        `spec.supersede`, different data or options replace the current request by a corrected one
        (linked both ways, audited; the old request and its jobs stay as evidence).

        Raises InvalidRequest (InvalidReportData naming the failing path, InvalidWatermark), NotFound (a
        template version that is missing, or another tenant's), IdempotencyConflict (same key, other data,
        no supersede), IllegalTransition (superseding while the current request's job is still active)."""
        template_id, version = self._check(spec)
        template = self.store.get_template(template_id, version, visible_to=spec.tenant)
        _check_data(template, spec.data)
        policy = self._policy(spec)
        _check_variant_mode(spec.variant, policy, spec.processor)
        fields = dict(
            tenant=spec.tenant, subject=spec.subject, period=spec.period, template_id=template_id,
            template_version=version, template_sha256=template.info.sha256, variant=spec.variant,
            document_class=policy.document_class, region=policy.region, processor=spec.processor,
            data_sha256=data_sha256(spec.data), schedule_id=spec.schedule_id,
        )
        watermark = dict(spec.watermark) if spec.watermark is not None else None
        request, created = self.store.insert_report_request(
            actor=actor, retention_s=policy.retention_s, watermark=watermark, id=new_id("rr"), **fields)
        parent = None
        if not created and not _same(request, fields, watermark):
            if not spec.supersede:
                raise IdempotencyConflict(
                    f"report request {request.id} for this subject, period and template already exists with "
                    "other data or options; to correct it, request again with --supersede "
                    "(API: \"supersede\": true)")
            old_jobs = self.store.request_jobs(request.id)
            _check_supersedable(request, old_jobs)
            parent = old_jobs[-1] if old_jobs else None
            request, created = self.store.supersede_report_request(
                request, actor=actor, retention_s=policy.retention_s, reason="corrected",
                watermark=watermark, id=new_id("rr"), **fields)
            if not created and not _same(request, fields, watermark):
                raise IdempotencyConflict(f"report request {request.id} superseded it first with other data")
        jobs = self.store.request_jobs(request.id)
        if not jobs:  # a new request, or one whose creator stopped before submitting its job
            snapshot = _snapshot(template, spec)
            policy = policy.evolve(report=_report_ref(request))
            jobs = [self._submit(request, policy, snapshot, key=f"report:{request.id}", parent=parent,
                                 actor=actor)[0]]
        log.info("report request %s (created=%s, revision %d) job %s", request.id, created, request.revision,
                 jobs[0].id)
        return RequestDetail(request, jobs), created

    def retry(self, request_id: str, *, actor: str, tenant: str | None = None,
              reason: str | None = None) -> Job:
        """A new job linked to the newest one, which must be failed or canceled (it stays as evidence).
        Retrying the same failed job twice yields one new job. `tenant` None reaches every tenant's
        requests (an operator, the CLI); `reason` (check_reason) is audited on the new job as
        `retry_requested` with `details.note`. Raises IllegalTransition (the newest job is active),
        RetryWouldFail (it failed the way every retry would: `retry_candidate`)."""
        note = check_reason(reason)
        request = self._visible(request_id, tenant)
        last = retry_candidate(self.store.request_jobs(request.id))
        if last.input_key is None:
            raise IllegalTransition("the failed job's input is gone")
        snapshot = read_object(self.router.for_region(last.region), last.input_key,
                               self.keys.key_for(RowKey.of(last)), expected_sha256=last.input_sha256)
        job, created = self._submit(request, last.policy, snapshot, key=f"report-retry:{last.id}",
                                    parent=last, actor=actor)
        if created:  # the submission event names the actor; this one says why and what it replaces
            details: dict[str, Any] = {"retry_of": last.id, **({"note": note} if note else {})}
            self.store.record_event("retry_requested", actor=actor, job_id=job.id, reason="retry_requested",
                                    details=details)
        return job

    def get(self, request_id: str, *, tenant: str | None = None) -> RequestDetail:
        request = self._visible(request_id, tenant)
        jobs = self.store.request_jobs(request.id)
        observation = self.store.provider_observation(jobs[-1].id) if jobs else None
        return RequestDetail(request, jobs, observation)

    def list(self, tenant: str, *, limit: int = 100) -> list[ReportRequest]:
        return self.store.list_report_requests(tenant, limit=limit)

    # -- helpers ---------------------------------------------------------------------------------------
    def _visible(self, request_id: str, tenant: str | None) -> ReportRequest:
        """Another tenant's request is indistinguishable from a missing one."""
        request = self.store.get_report_request(request_id)
        if tenant is not None and request.tenant != tenant:
            raise NotFound(f"no report request {request_id}")
        return request

    def _check(self, spec: RequestSpec) -> tuple[str, int]:
        check_tenant(spec.tenant)
        check_subject(spec.subject)
        check_period(spec.period)
        if spec.variant not in VARIANTS:
            raise InvalidRequest(f"variant must be one of {sorted(v for v in VARIANTS if v)} or null")
        if spec.processor not in self.processors:
            raise InvalidRequest(f"processor must be one of {sorted(self.processors)}")
        if not isinstance(spec.data, dict):
            raise InvalidRequest("data must be a JSON object")
        template_id, version = parse_template_ref(spec.template)
        check_template_id(template_id)
        return template_id, version

    def _policy(self, spec: RequestSpec) -> JobPolicy:
        """The class's policy as a report; the request's watermark fields over the class's spec."""
        try:
            base = self.settings.policy_for(spec.document_class)
        except ConfigError as exc:
            raise InvalidRequest(exc.message, field=exc.field) from exc
        if spec.watermark is None:
            return base.evolve(kind=Kind.REPORT)
        try:
            mark = WatermarkSpec.from_mapping(spec.watermark, base.watermark)
        except ConfigError as exc:
            raise InvalidWatermark(exc.message, field="watermark") from None
        return base.evolve(kind=Kind.REPORT, watermark=mark)

    def _with_fields(self, policy: JobPolicy, *, job_id: str, tenant: str, sha256: str) -> JobPolicy:
        """The policy with the job's field values frozen (a report has no caller fields)."""
        rules = self.settings.document_class(policy.document_class).mark_rules
        values = resolve_fields(rules, {}, job_id=job_id, tenant=tenant, issued_at=self.clock.now())
        return policy.evolve(fields={**values, "sha8": sha256[:8]})

    def _submit(self, request: ReportRequest, policy: JobPolicy, snapshot: bytes, *, key: str,
                parent: Job | None, actor: str) -> tuple[Job, bool]:
        """(job, created): store the input (sealed under a fresh data key, wrapped in the job's row)
        under a pre-chosen job id, then submit (idempotent on `key`). The class's marks get this job's
        field values (`{job_id}`, `{date}`, `{sha8}`...), as a watermark submission's do; a retry is a
        new job, so it gets its own. Every sha256 named is the snapshot's plaintext's."""
        blobs = self.router.for_region(policy.region)
        job_id = new_id()
        input_key = storage_keys.input_key(request.tenant, job_id)
        data_key, row = self.keys.new_key(request.tenant, job_id)
        sha256 = hashlib.sha256(snapshot).hexdigest()
        put_object(blobs, input_key, snapshot, data_key)
        policy = self._with_fields(policy, job_id=job_id, tenant=request.tenant, sha256=sha256)
        new = NewJob(
            tenant=request.tenant, policy=policy, input_key=input_key, input_sha256=sha256,
            input_bytes=len(snapshot), idempotency_key=key, request_hash=sha256,
            parent_job_id=parent.id if parent else None, report_request_id=request.id, actor=actor,
            job_id=job_id, data_key_provider=row.provider, data_key_kek_id=row.kek_id,
            data_key_wrapped=row.wrapped,
        )
        try:
            job, created = self.store.submit(new)
        except BaseException:
            blobs.delete(input_key)
            raise
        if job.input_key != input_key:
            blobs.delete(input_key)  # an earlier identical submission already owns its input
        return job, created


#: What to do instead of a retry, per deterministic failure (others: correct the request, then request again).
_INSTEAD = {
    TemplateDataInvalid.code: "correct the data with reports request --supersede (API: \"supersede\": true)",
    TemplateError.code: "publish a corrected template version (templates create) and request the report "
                      "with it",
}


def retry_candidate(jobs: Sequence[Job]) -> Job:
    """The job a retry of the request would replace: its newest (`jobs` oldest first), if that job was
    canceled or failed in a way another try may not repeat. Raises IllegalTransition (no job yet, or
    the newest is still active) and RetryWouldFail, saying why and what to do instead, when it failed
    deterministically (`deterministic_failure`). The API, the CLI and the console's Retry ask this."""
    if not jobs:
        raise IllegalTransition("the request has no job to retry yet")
    last = jobs[-1]
    if last.state not in (JobState.FAILED, JobState.CANCELED):
        raise IllegalTransition(f"only a failed or canceled job can be retried; {last.id} is "
                                f"{last.state.value}")
    code = last.last_error_code or ""
    if last.state is JobState.FAILED and deterministic_failure(code) is not None:
        instead = _INSTEAD.get(code, "correct the request (data, template or class) and request it again")
        raise RetryWouldFail(f"job {last.id} failed with {code} ({last.last_error_message or 'no message'}); "
                             "its input and policy are frozen, so a retry would fail the same way: "
                             f"{instead}")
    return last


def _check_variant_mode(variant: str | None, policy: JobPolicy, processor: str) -> None:
    """A PDF variant survives only vector watermarking (raster keeps no text, fonts or tags), and only
    docfence's own renderer is asked for one: a variant requested for a class that watermarks in another
    mode, or from an outside provider, is refused now (InvalidRequest naming `variant`), not failed by
    every render."""
    if variant is not None and processor != LOCAL_PROCESSOR:
        raise InvalidRequest(f"a {variant} report is rendered only by docfence itself (processor "
                             f"{LOCAL_PROCESSOR!r}), not by {processor!r}", field="variant")
    if variant is not None and policy.watermark is not None and Mode(policy.mode) is not Mode.VECTOR:
        raise InvalidRequest(f"a {variant} report cannot be watermarked in {Mode(policy.mode).value} mode "
                             f"(class {policy.document_class}); use a vector-mode class or no variant",
                             field="variant")


def deterministic_failure(code: str | None) -> type[DocumentError] | None:
    """The error class of `code` when the same input under the same frozen policy fails that way on
    every try: a DocumentError that is not retryable (core/errors.py: template_error, validation_failed,
    ...). Not RenderResourceExceeded: its limits are the workers' settings and its time depends on the
    machine's load. Codes outside the document errors (lease_expired, provider_*, internal_error) are
    not the document's doing: None."""
    stack: list[type[DocumentError]] = [DocumentError]
    while stack:
        cls = stack.pop()
        if cls.code == code:
            return None if cls.retryable or issubclass(cls, RenderResourceExceeded) else cls
        stack.extend(cls.__subclasses__())
    return None


def check_subject(subject: str) -> str:
    """`subject` when it matches SUBJECT_PATTERN; InvalidRequest (field "subject") otherwise."""
    if not isinstance(subject, str) or not _SUBJECT_RE.fullmatch(subject):
        raise InvalidRequest(SUBJECT_RULE, field="subject")
    return subject


def check_period(period: str) -> str:
    """A period key (see PERIOD_FORMS) with real months, days and weeks; InvalidRequest otherwise."""
    match = _PERIOD_RE.fullmatch(period or "") if isinstance(period, str) else None
    ok = match is not None
    if match is not None:
        year, month, day, week = match["y"], match["m"], match["d"], match["w"]
        ok = int(year) >= 1  # there is no year 0000 (the calendar starts at 0001)
        if ok and month is not None:
            ok = 1 <= int(month) <= 12 and (day is None or
                                            1 <= int(day) <= calendar.monthrange(int(year), int(month))[1])
        if ok and week is not None:
            ok = 1 <= int(week) <= _iso_weeks(int(year))
    if not ok:
        raise InvalidRequest(f"period={period!r}: must be {PERIOD_FORMS}", field="period")
    return period


def _iso_weeks(year: int) -> int:
    return date(year, 12, 28).isocalendar()[1]  # 28 December always lies in the year's last ISO week


#: What checking one request's data against its template's schema may cost, in a child process: CPU
#: seconds (RLIMIT_CPU), and wall-clock seconds (SIGALRM) for a child that gets no CPU on a busy machine.
DATA_CHECK_CPU_S = 2
DATA_CHECK_WALL_S = 10


def _check_data(template: TemplateVersion, data: Any) -> None:
    """The template's own check, at request time: 400 naming the failing paths (never the values).
    It runs in a forked child under DATA_CHECK_CPU_S of CPU at the lowest priority, so a costly schema
    or payload spends its own budget, not the API's threads or other tenants' CPU; a check that runs out
    answers RenderResourceExceeded (422 render_resource_exceeded). Raises TemplateError (422) for a
    schema that cannot be checked (`check_schema`)."""
    answer = Forked(functools.partial(_checked_in_child, template.schema, data)).result()
    if answer is None:  # killed at its CPU or wall-clock budget (or it could not answer)
        raise RenderResourceExceeded(f"template {template.info.ref}: checking the report data against its "
                                     f"schema exceeded its budget ({DATA_CHECK_CPU_S} s of CPU)")
    code, message = answer
    if code == TemplateDataInvalid.code:
        raise InvalidReportData(f"template {template.info.ref}: {message}", field="data")
    if code == TemplateError.code:
        raise TemplateError(f"template {template.info.ref}: {message}")
    if code != "ok":
        raise InternalError(f"the report data check failed unexpectedly ({code})")


def _checked_in_child(schema: dict[str, Any], data: Any) -> tuple[str, str]:
    """(code, message) of `validate_data` in this forked child: "ok", a document error's code, or the
    name of an unexpected exception (never its text, which may quote the data)."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the default action ends the process
    signal.alarm(DATA_CHECK_WALL_S)
    resource.setrlimit(resource.RLIMIT_CPU, (DATA_CHECK_CPU_S, DATA_CHECK_CPU_S + 1))  # SIGXCPU, SIGKILL
    os.nice(19)
    try:
        validate_data(schema, data)
    except (TemplateDataInvalid, TemplateError) as exc:
        return exc.code, exc.message
    except Exception as exc:  # answered as a code: the parent raises InternalError
        return type(exc).__name__, ""
    return "ok", ""


def _same(request: ReportRequest, fields: dict[str, Any], watermark: dict[str, Any] | None) -> bool:
    """Whether an existing request is what the caller asks for (so returning it is idempotent)."""
    return (request.data_sha256, request.variant, request.processor, request.watermark) == \
        (fields["data_sha256"], fields["variant"], fields["processor"], watermark)


def _check_supersedable(request: ReportRequest, jobs: list[Job]) -> None:
    """A correction replaces a request whose newest job ended (or that has none); never a running one."""
    if jobs and not jobs[-1].terminal:
        raise IllegalTransition(f"report request {request.id}'s job {jobs[-1].id} is still "
                                f"{jobs[-1].state.value}; cancel it or let it end before superseding")


def _report_ref(request: ReportRequest) -> dict[str, Any]:
    return {"template": f"{request.template_id}@{request.template_version}", "processor": request.processor,
            "variant": request.variant, "request_id": request.id}


def _snapshot(template: TemplateVersion, spec: RequestSpec) -> bytes:
    return build_snapshot(name=template.info.name, html=template.html, css=template.css,
                          assets_b64=template.assets, schema=template.schema, sha256=template.info.sha256,
                          data=spec.data, variant=spec.variant, period=spec.period)
