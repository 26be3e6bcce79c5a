"""Report requests: create idempotently (one request per tenant, subject, period and template@version, with
exactly one initial job), read with their jobs, and operator retries (a new job linked to the failed one)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from docfence import layout
from docfence.blobs import RegionRouter
from docfence.config import Settings
from docfence.core.errors import ConfigError, IdempotencyConflict, IllegalTransition, NotFound
from docfence.core.ids import new_id
from docfence.core.policy import JobPolicy, Kind
from docfence.core.records import Job, NewJob
from docfence.core.states import JobState
from docfence.engines.report import VARIANTS
from docfence.engines.report_job import build_snapshot
from docfence.reports.templates import check_template_id, report_store
from docfence.service import InvalidRequest, check_tenant
from docfence.store.base import Store
from docfence.store.reports import ProviderObservation, ReportRequest, TemplateVersion

log = logging.getLogger(__name__)

LOCAL_PROCESSOR = "local"
_SUBJECT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_PERIOD_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,31}")
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
    """Report-request use cases; `processors` are the configured provider names besides "local"."""

    def __init__(self, settings: Settings, store: Store, router: RegionRouter, *,
                 processors: Collection[str] = ()) -> None:
        self.settings, self.store, self.router = settings, report_store(store), router
        self.processors = frozenset(processors) | {LOCAL_PROCESSOR}

    def create(self, spec: RequestSpec, *, actor: str) -> tuple[RequestDetail, bool]:
        """(detail, created). Creating the same request again returns it (and its one initial job).

        Raises InvalidRequest, NotFound (a template version that is missing, or another tenant's),
        IdempotencyConflict (same key, other data)."""
        template_id, version = self._check(spec)
        template = self.store.get_template(template_id, version, visible_to=spec.tenant)
        policy = self._policy(spec)
        digest = data_sha256(spec.data)
        request, created = self.store.insert_report_request(
            actor=actor, retention_s=policy.retention_s, id=new_id("rr"), tenant=spec.tenant,
            subject=spec.subject, period=spec.period, template_id=template_id, template_version=version,
            template_sha256=template.info.sha256, variant=spec.variant, document_class=policy.document_class,
            region=policy.region, processor=spec.processor, data_sha256=digest, schedule_id=spec.schedule_id,
        )
        if not created and (request.data_sha256, request.variant, request.processor) != \
                (digest, spec.variant, spec.processor):
            raise IdempotencyConflict("this report request already exists with other data or options")
        jobs = self.store.request_jobs(request.id)
        if not jobs:  # a new request, or one whose creator stopped before submitting its job
            snapshot = _snapshot(template, spec)
            policy = policy.evolve(report=_report_ref(request))
            jobs = [self._submit(request, policy, snapshot, key=f"report:{request.id}", parent=None,
                                 actor=actor)]
        log.info("report request %s (created=%s) job %s", request.id, created, jobs[0].id)
        return RequestDetail(request, jobs), created

    def retry(self, request_id: str, *, actor: str, tenant: str | None = None) -> Job:
        """A new job linked to the newest one, which must be failed or canceled (it stays as evidence).
        Retrying the same failed job twice yields one new job. Raises IllegalTransition otherwise."""
        request = self._visible(request_id, tenant)
        jobs = self.store.request_jobs(request.id)
        if not jobs:
            raise IllegalTransition("the request has no job to retry yet")
        last = jobs[-1]
        if last.state not in (JobState.FAILED, JobState.CANCELED):
            raise IllegalTransition(f"only a failed or canceled job can be retried; {last.id} is "
                                    f"{last.state.value}")
        if last.input_key is None:
            raise IllegalTransition("the failed job's input is gone")
        snapshot = self.router.for_region(last.region).get(last.input_key, expected_sha256=last.input_sha256)
        return self._submit(request, last.policy, snapshot, key=f"report-retry:{last.id}", parent=last,
                            actor=actor)

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
        if not _SUBJECT_RE.fullmatch(spec.subject or ""):
            raise InvalidRequest("subject must match [A-Za-z0-9][A-Za-z0-9._:-]* (at most 128 characters)")
        if not _PERIOD_RE.fullmatch(spec.period or ""):
            raise InvalidRequest("period must be a short key such as 2026-11")
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
        try:
            base = self.settings.policy_for(spec.document_class)
        except ConfigError as exc:
            raise InvalidRequest(str(exc)) from exc
        return base.evolve(kind=Kind.REPORT)

    def _submit(self, request: ReportRequest, policy: JobPolicy, snapshot: bytes, *, key: str,
                parent: Job | None, actor: str) -> Job:
        """Store the input under a pre-chosen job id, then submit (idempotent on `key`)."""
        blobs = self.router.for_region(policy.region)
        job_id = new_id()
        input_key = layout.input_key(request.tenant, job_id)
        info = blobs.put(input_key, snapshot)
        new = NewJob(
            tenant=request.tenant, policy=policy, input_key=input_key, input_sha256=info.sha256,
            input_bytes=info.bytes, idempotency_key=key, request_hash=info.sha256,
            parent_job_id=parent.id if parent else None, report_request_id=request.id, actor=actor,
            job_id=job_id,
        )
        try:
            job, _created = self.store.submit(new)
        except BaseException:
            blobs.delete(input_key)
            raise
        if job.input_key != input_key:
            blobs.delete(input_key)  # an earlier identical submission already owns its input
        return job


def _report_ref(request: ReportRequest) -> dict[str, Any]:
    return {"template": f"{request.template_id}@{request.template_version}", "processor": request.processor,
            "variant": request.variant, "request_id": request.id}


def _snapshot(template: TemplateVersion, spec: RequestSpec) -> bytes:
    return build_snapshot(name=template.info.name, html=template.html, css=template.css,
                          assets_b64=template.assets, schema=template.schema, sha256=template.info.sha256,
                          data=spec.data, variant=spec.variant)
