"""Routes of the console (`/console`, `/console/api/...`) and `/metrics`.

The page itself is static and holds no data; every JSON call sends `Authorization: Bearer <key>` and
is checked against core.access like every API route: a tenant key (read or admin) sees its own tenant
only, with worker hosts and pids replaced by aliases; an operator key sees every tenant, may cancel and
retry every tenant's work with a reason, and alone may pause and resume claims and change class modes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Query
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from docfence.api.console import views
from docfence.api.deps import ConsoleRead, JobsCancel, OpsClaims, OpsModes, ServiceDep
from docfence.core.access import REASON_CHARS
from docfence.core.errors import IllegalTransition, InvalidRequest, NotFound
from docfence.core.records import Job
from docfence.observability.exposition import CONTENT_TYPE_LATEST, render_metrics
from docfence.observability.inspect import inspect_job, inspection_dict
from docfence.reports.requests import retry_candidate
from docfence.service import Principal, Service

STATIC = Path(__file__).parent / "static"
_FILES = {"console.js": "text/javascript", "console.css": "text/css"}
_NO_STORE = {"Cache-Control": "no-store"}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")

StateName = Literal["queued", "rendering", "succeeded", "failed", "canceled"]
router = APIRouter(include_in_schema=False)
metrics_router = APIRouter(include_in_schema=False)


class PauseIn(BaseModel):
    scope: Literal["all", "vector", "raster"]
    reason: str | None = Field(default=None, max_length=200)


class CancelPreviewIn(BaseModel):
    """The job table's filters, as `GET /console/api/jobs` takes them (`job_id`: the search box); only
    queued and rendering jobs can be canceled."""

    job_id: str | None = Field(default=None, max_length=128)
    state: Literal["queued", "rendering"] | None = None
    mode: Literal["vector", "raster"] | None = None
    document_class: str | None = Field(default=None, max_length=64)
    tenant: str | None = Field(default=None, max_length=64)
    min_age_s: float | None = Field(default=None, ge=0)


class CancelMatchingIn(BaseModel):
    """The ids a preview answered and the user confirmed, and why (required, audited on each job)."""

    ids: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        min_length=1, max_length=views.TABLE_LIMIT)
    reason: str = Field(min_length=1, max_length=REASON_CHARS)


class ModeIn(BaseModel):
    document_class: str = Field(min_length=1, max_length=64)
    mode: Literal["vector", "raster"]


def _tenant(principal: Principal) -> str | None:
    """The tenant this key's console view is limited to (None: every tenant, for an operator)."""
    return principal.tenant_view


def _names(principal: Principal, service: Service) -> Callable[[str], str]:
    """How worker hosts and pids read for this key: as they are for operators, aliased for tenants."""
    return views.unmasked if principal.allows("ops.workers") else service.worker_alias


def _mask_workers(detail: dict[str, Any], principal: Principal, service: Service) -> dict[str, Any]:
    """Worker hosts and pids only for operators; tenant views get the stable aliases /v1 shows."""
    if principal.allows("ops.workers"):
        return detail
    alias, seen = service.worker_alias, set()
    job = detail["job"]
    if job.get("lease_owner"):
        seen.add(job["lease_owner"])
        job["lease_owner"] = alias(job["lease_owner"])
    for attempt in detail["attempts"]:
        seen.add(attempt["worker"])
        attempt["worker"] = alias(attempt["worker"])
    for event in detail["timeline"]:
        seen.add(event["actor"])
        event["actor"] = alias(event["actor"])
    steps = detail["next_steps"]
    for name in sorted(seen, key=len, reverse=True):  # the explanations quote the lease owner
        if alias(name) != name:
            steps = [step.replace(name, alias(name)) for step in steps]
    detail["next_steps"] = steps
    return detail


@router.get("/console")
def console_page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html",
                        headers={**_NO_STORE, "Content-Security-Policy": _CSP, "X-Frame-Options": "DENY"})


@router.get("/console/static/{name}")
def console_static(name: str) -> FileResponse:
    if name not in _FILES:
        raise NotFound("no such console file")
    return FileResponse(STATIC / name, media_type=_FILES[name], headers=_NO_STORE)


@router.get("/console/api/whoami")
def whoami(principal: ConsoleRead) -> dict[str, Any]:
    tenant = _tenant(principal)
    return {"tenant": None if principal.is_operator else principal.tenant, "all_tenants": tenant is None,
            "operator": principal.allows("ops.claims"), "admin": "admin" in principal.scopes,
            # what the console offers: the actions call /v1 (like the CLI), which checks again
            "can_cancel": principal.allows("jobs.cancel"), "can_delete": principal.allows("jobs.delete"),
            "can_retry": principal.allows("reports.retry")}


@router.get("/console/api/summary")
def summary(service: ServiceDep, principal: ConsoleRead) -> dict[str, Any]:
    tenant, store = _tenant(principal), service.store
    now = store.now()
    leases = store.valid_lease_count() if tenant is None else None  # a count over every tenant
    pauses = store.claim_pauses()
    # who paused and why is operators' business; a tenant view sees only what is paused
    detail = [{"scope": p.scope, "actor": p.actor, "at": p.paused_at.isoformat(), "reason": p.reason}
              for p in pauses] if principal.allows("ops.claims") else []
    return {"now": now.isoformat(), "counts": views.counts(store, tenant),
            "paused": [p.scope for p in pauses], "pauses": detail, "valid_leases": leases,
            "class_modes": store.class_modes(), "age": views.age_chart(store, tenant, now),
            "throughput": views.throughput_chart(store, tenant, now),
            "duration": views.duration_chart(store, tenant)}


@router.get("/console/api/jobs")
def jobs(
    service: ServiceDep, principal: ConsoleRead,
    state: Annotated[StateName | None, Query()] = None,
    mode: Annotated[Literal["vector", "raster"] | None, Query()] = None,
    document_class: Annotated[str | None, Query(max_length=64)] = None,
    tenant: Annotated[str | None, Query(max_length=64)] = None,
    min_age_s: Annotated[float | None, Query(ge=0)] = None,
    job_id: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=views.TABLE_LIMIT)] = views.TABLE_LIMIT,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> dict[str, Any]:
    """The job table under the filters, newest first, `limit` rows per page; `next_cursor` (null on
    the last page) asks for the next, older page. `job_id` (the search box) finds that one job, else
    the jobs of the report request with that id, else the jobs with that label, else that filename
    (exact matches, under the other filters, paged like the table)."""
    store, now = service.store, service.store.now()
    filters = views.TableFilters(text=job_id or "", state=state, mode=mode, document_class=document_class,
                                 tenant=tenant, min_age_s=min_age_s)
    rows = views.table_rows(store, filters, own=_tenant(principal), now=now,
                            worker_name=_names(principal, service), limit=limit,
                            after=views.parse_cursor(cursor) if cursor else None)
    nxt = views.cursor_of(rows[-1]) if len(rows) == limit else None
    return {"now": now.isoformat(), "jobs": rows, "limit": limit, "next_cursor": nxt}


@router.get("/console/api/jobs/{job_id}")
def job_detail(job_id: str, service: ServiceDep, principal: ConsoleRead) -> dict[str, Any]:
    """The job page; `retry` says whether this key may retry the job's report request from here, and
    when not, why (e.g. a failure a retry would repeat), as `POST /v1/report-requests/{id}/retry` would."""
    own = _tenant(principal)
    ins = inspect_job(service.store, job_id)
    if own is not None and ins.job.tenant != own:
        raise NotFound(f"no job {job_id}")  # another tenant's job looks missing
    detail = inspection_dict(ins, recipient_visible=principal.allows("jobs.recipient"))
    detail["retry"] = _retry_offer(service, principal, ins.job)
    return _mask_workers(detail, principal, service)


def _retry_offer(service: Service, principal: Principal, job: Job) -> dict[str, Any]:
    """{"offered", "why", "code"}: a report job whose request this key may retry, and the refusal the
    retry would answer (ReportRequests.retry asks the same `retry_candidate`)."""
    if job.report_request_id is None or not principal.allows("reports.retry"):
        return {"offered": False, "why": None, "code": None}
    try:
        newest = retry_candidate(service.store.request_jobs(job.report_request_id))
    except IllegalTransition as exc:  # RetryWouldFail too: it says why and what to do instead
        return {"offered": False, "why": exc.message, "code": exc.code}
    if newest.id != job.id:
        return {"offered": False, "why": f"job {newest.id} is the request's newest: retry from its page",
                "code": None}
    return {"offered": True, "why": None, "code": None}


@router.post("/console/api/cancel-matching/preview")
def cancel_matching_preview(body: CancelPreviewIn, service: ServiceDep,
                            principal: ConsoleRead) -> dict[str, Any]:
    """Step one of a bulk cancel: the queued and rendering jobs the job table selects under these
    filters and search text (resolved as `GET /console/api/jobs` resolves them, over every page), at
    most TABLE_LIMIT: `count`, their `ids` and the first PREVIEW_ROWS `rows`; `more` when further
    jobs match (cancel these, then preview again). Nothing is canceled here."""
    principal.require("jobs.cancel")
    store, now = service.store, service.store.now()
    filters = views.TableFilters(text=body.job_id or "", state=body.state, mode=body.mode,
                                 document_class=body.document_class, tenant=body.tenant,
                                 min_age_s=body.min_age_s)
    rows, more = views.cancelable_rows(store, filters, own=_tenant(principal), now=now,
                                       worker_name=_names(principal, service))
    return {"now": now.isoformat(), "count": len(rows), "more": more, "ids": [r["id"] for r in rows],
            "rows": rows[:views.PREVIEW_ROWS]}


@router.post("/console/api/cancel-matching")
def cancel_matching(body: CancelMatchingIn, service: ServiceDep, principal: JobsCancel) -> dict[str, Any]:
    """Step two: cancel exactly the ids a preview answered (at most TABLE_LIMIT), each through
    Service.cancel_many like `POST /v1/jobs/{id}/cancel`, checked and audited one by one with the
    required reason. A job submitted after the preview is not in the list, so it is never swept in;
    an id that ended meanwhile, or that this key may not see, is reported in `skipped` with why."""
    done = service.cancel_many(principal, body.ids, reason=body.reason)
    return {"canceled": done.canceled, "skipped": done.skipped}


@router.post("/console/api/pause")
def pause(body: PauseIn, service: ServiceDep, principal: OpsClaims) -> dict[str, Any]:
    """Stop new claims (all, or one mode) for every tenant, audited with the reason; draining is
    pausing and watching `valid_leases` in the summary fall to zero."""
    service.store.pause_claims(body.scope, actor=principal.actor, reason=body.reason)
    return {"paused": service.store.paused_scopes()}


@router.post("/console/api/resume")
def resume(body: PauseIn, service: ServiceDep, principal: OpsClaims) -> dict[str, Any]:
    service.store.resume_claims(body.scope, actor=principal.actor, reason=body.reason)
    return {"paused": service.store.paused_scopes()}


@router.post("/console/api/class-modes")
def set_class_mode(body: ModeIn, service: ServiceDep, principal: OpsModes) -> dict[str, Any]:
    """Route *new* jobs of a document class to another mode (running and queued jobs keep theirs)."""
    if body.document_class not in service.settings.all_classes():
        raise InvalidRequest(f"unknown document class {body.document_class!r}")
    service.store.set_class_mode(body.document_class, body.mode, actor=principal.actor)
    return {"class_modes": service.store.class_modes()}


@metrics_router.get("/metrics")
async def metrics(service: ServiceDep) -> Response:
    """Prometheus text format: this host's process metrics and the store-derived gauges."""
    body = await run_in_threadpool(render_metrics, service.store)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def install(app: FastAPI) -> None:
    """Mount the console and /metrics on the API app (idempotent)."""
    if not any(getattr(r, "path", None) == "/console" for r in app.router.routes):
        app.include_router(router)
        app.include_router(metrics_router)
