"""The ReportStore and ProviderStore of the SQL stores: templates, report requests, schedules, provider
observations (their records live in core/records/reports.py).

A mixin of SqlStore: it uses the same `_tx()` and named queries (queries/<dialect>/reports.sql). Jobs
are only ever moved by SqlStore's fenced transitions (store/sqlstore.py), the dispatcher's claim too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from docfence.core.errors import LeaseLost, NotFound, TemplateIdTaken
from docfence.core.records import Job
from docfence.core.records.reports import (
    ProviderObservation,
    ReportRequest,
    Schedule,
    TemplateInfo,
    TemplateVersion,
)
from docfence.store.sqlbase import Row, SqlBase, _json, known_fields

REPORTS_CHAIN = "reports"  # the audit chain of template, request and schedule events
#: `visible_to` of template reads: every template (internal use, the CLI). None means shared templates
#: only (an operator); a tenant name means that tenant's own templates and the shared ones.
ALL_TENANTS = "*"


def _template_info(row: Row) -> TemplateInfo:
    return TemplateInfo(row["id"], int(row["version"]), row["name"], row["sha256"], row["created_at"],
                        row["created_by"], row.get("owner"))


def _template(row: Row) -> TemplateVersion:
    return TemplateVersion(_template_info(row), row["html"], row["css"], dict(_json(row["assets"])),
                           dict(_json(row["json_schema"])))


def _taken_message(template_id: str, claimed: Row | None) -> str:
    if claimed is not None and claimed["tenant"] is None:
        return f"template {template_id} is shared; only operators publish its versions"
    return f"template id {template_id} belongs to another owner; choose another id"


def _request(row: Row) -> ReportRequest:
    values = _fields(ReportRequest, row)
    values["watermark"] = dict(_json(row["watermark"])) if row.get("watermark") else None
    return ReportRequest(**values)


def _json_or_none(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


_fields = known_fields  # the record's fields only: columns of newer releases are ignored


class ReportQueries(SqlBase):
    """Report-pipeline methods of SqlStore; each runs named queries inside `self._tx()`."""

    # -- templates ---------------------------------------------------------------------------------
    def insert_template_version(
        self, template_id: str, *, name: str, sha256: str, html: str, css: str, assets: dict[str, str],
        schema: dict[str, Any], actor: str, owner: str | None = None,
    ) -> TemplateVersion:
        """Add version max+1 of `template_id` (a new version; an existing one is never changed).

        The first version names the id's owner (a tenant, or None: shared with every tenant); a later
        version by any other owner raises TemplateIdTaken and stores nothing."""
        with self._tx() as tx:
            tx.run("claim_template_owner", id=template_id, owner=owner, created_by=actor,
                   now=self._now_param())
            claimed = tx.one("get_template_owner", id=template_id)
            if claimed is None or claimed["tenant"] != owner:
                raise TemplateIdTaken(_taken_message(template_id, claimed))
            row = tx.one("insert_template_version", id=template_id, template_name=name, sha256=sha256,
                         html=html, css=css, assets=json.dumps(assets, sort_keys=True),
                         json_schema=json.dumps(schema, sort_keys=True), created_by=actor,
                         now=self._now_param())
            assert row is not None
            self._append_event(tx, "template_version_created", actor=actor, job_id=None, reason=None,
                               details={"template": f"{template_id}@{row['version']}", "sha256": sha256,
                                        "shared": owner is None},
                               chain=REPORTS_CHAIN)
        return _template({**row, "owner": owner})

    def get_template(self, template_id: str, version: int | None = None, *,
                     visible_to: str | None = ALL_TENANTS) -> TemplateVersion:
        """One version (the newest when `version` is None) that `visible_to` may see (see ALL_TENANTS);
        raises NotFound, for another tenant's template exactly as for a missing one."""
        with self._tx(write=False) as tx:
            if version is None:
                row = tx.one("get_latest_template", id=template_id, visible_to=visible_to)
            else:
                row = tx.one("get_template", id=template_id, version=version, visible_to=visible_to)
        if row is None:
            raise NotFound(f"no template {template_id}@{version or 'latest'}")
        return _template(row)

    def list_templates(self, template_id: str | None = None, *, visible_to: str | None = ALL_TENANTS,
                       limit: int = 500) -> list[TemplateInfo]:
        with self._tx(write=False) as tx:
            rows = tx.all("list_templates", id=template_id, visible_to=visible_to, limit=limit)
        return [_template_info(r) for r in rows]

    # -- report requests ---------------------------------------------------------------------------
    def insert_report_request(
        self, *, actor: str, retention_s: float, watermark: dict[str, Any] | None = None, **fields: Any
    ) -> tuple[ReportRequest, bool]:
        """Create the request, or return the current one of the same (tenant, subject, period,
        template@version)."""
        with self._tx() as tx:
            row = tx.one("insert_report_request", created_by=actor, retention_s=retention_s,
                         now=self._now_param(), revision=1, supersedes=None,
                         watermark=_json_or_none(watermark), **fields)
            if row is None:
                keys = ("tenant", "subject", "period", "template_id", "template_version")
                found = tx.one("find_report_request", **{k: fields[k] for k in keys})
                if found is None:  # the id itself collided: vanishingly unlikely with random ids
                    raise NotFound("the report request could not be created")
                return _request(found), False
            self._append_event(
                tx, "report_request_created", actor=actor, job_id=None, reason=None, chain=REPORTS_CHAIN,
                details={"request_id": row["id"], "period": row["period"], "processor": row["processor"],
                         "region": row["region"],
                         "template": f"{row['template_id']}@{row['template_version']}"},
            )
        return _request(row), True

    def supersede_report_request(
        self, old: ReportRequest, *, actor: str, retention_s: float, reason: str,
        watermark: dict[str, Any] | None = None, **fields: Any,
    ) -> tuple[ReportRequest, bool]:
        """Replace the current request `old` by a correction (revision + 1, linked both ways), audited as
        "report_request_superseded" in the same transaction. `old`, its jobs and their failed attempts
        stay untouched as evidence. (request, True), or (the current request, False) when `old` was
        already superseded by someone else: the caller compares it with what it asked for."""
        with self._tx() as tx:
            marked = tx.one("mark_report_request_superseded", id=old.id, new_id=fields["id"],
                            now=self._now_param())
            if marked is None:
                keys = ("tenant", "subject", "period", "template_id", "template_version")
                found = tx.one("find_report_request", **{k: getattr(old, k) for k in keys})
                if found is None:
                    raise NotFound(f"no current report request supersedes {old.id}")
                return _request(found), False
            row = tx.one("insert_report_request", created_by=actor, retention_s=retention_s,
                         now=self._now_param(), revision=old.revision + 1, supersedes=old.id,
                         watermark=_json_or_none(watermark), **fields)
            if row is None:  # the id itself collided: vanishingly unlikely with random ids
                raise NotFound("the corrected report request could not be created")
            self._append_event(
                tx, "report_request_superseded", actor=actor, job_id=None, reason=reason, chain=REPORTS_CHAIN,
                details={"request_id": row["id"], "supersedes": old.id, "revision": row["revision"],
                         "period": row["period"], "old_data_sha256": old.data_sha256,
                         "data_sha256": row["data_sha256"],
                         "template": f"{row['template_id']}@{row['template_version']}"},
            )
        return _request(row), True

    def get_report_request(self, request_id: str) -> ReportRequest:
        with self._tx(write=False) as tx:
            row = tx.one("get_report_request", id=request_id)
        if row is None:
            raise NotFound(f"no report request {request_id}")
        return _request(row)

    def list_report_requests(self, tenant: str, *, limit: int = 100) -> list[ReportRequest]:
        with self._tx(write=False) as tx:
            rows = tx.all("list_report_requests", tenant=tenant, limit=limit)
        return [_request(r) for r in rows]

    def request_jobs(self, request_id: str) -> list[Job]:
        """The request's jobs, oldest first."""
        with self._tx(write=False) as tx:
            return [self._job(r) for r in tx.all("list_request_jobs", request_id=request_id)]

    # -- schedules ---------------------------------------------------------------------------------
    def insert_schedule(self, *, actor: str, **fields: Any) -> tuple[Schedule, bool]:
        """Create a schedule, or return the one of the same (tenant, subject, template@version)."""
        with self._tx() as tx:
            row = tx.one("insert_schedule", created_by=actor, now=self._now_param(), **fields)
            if row is None:
                keys = ("tenant", "subject", "template_id", "template_version")
                found = tx.one("find_schedule", **{k: fields[k] for k in keys})
                if found is None:
                    raise NotFound("the schedule could not be created")
                return Schedule(**_fields(Schedule, found)), False
            self._append_event(tx, "schedule_created", actor=actor, job_id=None, reason=None,
                               details={"schedule_id": row["id"], "day_of_month": row["day_of_month"],
                                        "template": f"{row['template_id']}@{row['template_version']}"},
                               chain=REPORTS_CHAIN)
        return Schedule(**_fields(Schedule, row)), True

    def get_schedule(self, schedule_id: str) -> Schedule:
        with self._tx(write=False) as tx:
            row = tx.one("get_schedule", id=schedule_id)
        if row is None:
            raise NotFound(f"no schedule {schedule_id}")
        return Schedule(**_fields(Schedule, row))

    def list_schedules(self, tenant: str | None = None) -> list[Schedule]:
        with self._tx(write=False) as tx:
            return [Schedule(**_fields(Schedule, r)) for r in tx.all("list_schedules", tenant=tenant)]

    def advance_schedule(
        self, schedule_id: str, period: str, *, actor: str, request_id: str | None = None,
        skipped: Sequence[str] = (),
    ) -> bool:
        """Move `last_period` forward to `period` (never back), audited as "schedule_run" (the request of
        `period` exists) or "schedule_periods_skipped" (periods outside the catch-up window, no request).

        False when another scheduler already recorded this period (or a later one)."""
        with self._tx() as tx:
            if tx.one("advance_schedule", id=schedule_id, period=period) is None:
                return False
            if skipped:
                self._append_event(tx, "schedule_periods_skipped", actor=actor, job_id=None,
                                   reason="outside_catch_up_window", chain=REPORTS_CHAIN,
                                   details={"schedule_id": schedule_id, "periods": list(skipped)})
            else:
                self._append_event(tx, "schedule_run", actor=actor, job_id=None, reason=None,
                                   chain=REPORTS_CHAIN,
                                   details={"schedule_id": schedule_id, "period": period,
                                            "request_id": request_id})
        return True

    # -- provider-rendered jobs (SqlStore.claim_provider_jobs leases them) -----------------------
    def record_provider_observation(
        self, job_id: str, attempt: int, worker: str, *, provider: str, kind: str,
        provider_job_id: str | None = None, status: str | None = None, http_status: int | None = None,
        reason: str | None = None, observed_at: datetime | None = None,
    ) -> ProviderObservation:
        """Persist one pass and extend the lease, in one transaction; raises LeaseLost when stale."""
        with self._tx() as tx:
            if tx.one("heartbeat", id=job_id, attempt=attempt, worker=worker, now=self._now_param()) is None:
                raise LeaseLost(f"lease on job {job_id} attempt {attempt} is lost")
            row = tx.one("upsert_provider_observation", job_id=job_id, attempt=attempt, worker=worker,
                         provider=provider, provider_job_id=provider_job_id, status=status, kind=kind,
                         http_status=http_status, reason=reason, observed_at=observed_at,
                         now=self._now_param())
            if row is None:
                raise LeaseLost(f"lease on job {job_id} attempt {attempt} is lost")
        return ProviderObservation(**_fields(ProviderObservation, row))

    def finish_provider_observation(
        self, job_id: str, attempt: int, worker: str, outcome: str, *, details: dict[str, Any]
    ) -> None:
        """Record how polling ended, with a "provider_outcome" audit event (fenced by the lease)."""
        with self._tx() as tx:
            if tx.one("heartbeat", id=job_id, attempt=attempt, worker=worker, now=self._now_param()) is None:
                raise LeaseLost(f"lease on job {job_id} attempt {attempt} is lost")
            tx.one("finish_provider_observation", job_id=job_id, attempt=attempt, outcome=outcome)
            self._append_event(tx, "provider_outcome", actor=worker, job_id=job_id, reason=outcome,
                               details=details, chain=REPORTS_CHAIN)

    def provider_observation(self, job_id: str) -> ProviderObservation | None:
        with self._tx(write=False) as tx:
            row = tx.one("get_provider_observation", job_id=job_id)
        return ProviderObservation(**_fields(ProviderObservation, row)) if row else None
