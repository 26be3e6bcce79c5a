"""The ReportStore and ProviderStore conformance suites: template versions are numbered, immutable and
visible only to their owner (or to all when shared); report requests and schedules are idempotent on
their natural keys; provider-rendered jobs are claimed and observed under a fenced lease.
Subclass them with `store` and `clock` fixtures (one store per dialect)."""

from __future__ import annotations

from typing import Any

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import LeaseLost, NotFound, TemplateIdTaken
from docfence.core.policy import JobPolicy, Kind
from docfence.core.records import NewJob


def add_template(store, template_id: str = "monthly", owner: str | None = "t1", html: str = "<p>v</p>"):  # type: ignore[no-untyped-def]
    return store.insert_template_version(template_id, name="Monthly", sha256=str(len(html)) * 64, html=html,
                                         css="", assets={}, schema={"type": "object"}, actor="op",
                                         owner=owner)


def request_fields(template_id: str = "monthly", version: int = 1, **overrides: Any) -> dict[str, Any]:
    fields = dict(tenant="t1", subject="patient-7", period="2026-11", template_id=template_id,
                  template_version=version, template_sha256="a" * 64, variant=None, document_class="default",
                  region="local", processor="local", data_sha256="d" * 64, schedule_id=None)
    return {**fields, **overrides}


class ReportStoreContract:
    """Subclass this in a test module that provides `store` and `clock` fixtures (one store per dialect)."""

    def test_template_versions_are_numbered_and_visible_to_their_owner(self, store) -> None:  # type: ignore[no-untyped-def]
        first = add_template(store, html="<p>1</p>")
        second = add_template(store, html="<p>2</p>")
        assert (first.info.version, second.info.version) == (1, 2) and second.info.owner == "t1"
        assert store.get_template("monthly").html == "<p>2</p>"
        assert store.get_template("monthly", 1, visible_to="t1").html == "<p>1</p>"
        for outsider in ("t2", None):  # another tenant, and an operator who sees shared templates only
            with pytest.raises(NotFound):
                store.get_template("monthly", visible_to=outsider)
        with pytest.raises(TemplateIdTaken):
            add_template(store, owner="t2")
        add_template(store, "shared", owner=None)
        assert store.get_template("shared", visible_to="t2").info.owner is None
        assert sorted(t.ref for t in store.list_templates(visible_to="t1")) == [
            "monthly@1", "monthly@2", "shared@1"]
        assert [t.ref for t in store.list_templates(visible_to="t2")] == ["shared@1"]
        assert [t.version for t in store.list_templates("monthly")] == [1, 2]

    def test_a_report_request_is_idempotent_and_lists_its_jobs(self, store) -> None:  # type: ignore[no-untyped-def]
        add_template(store)
        request, created = store.insert_report_request(actor="key:k1", retention_s=3600, id="rr_1",
                                                       **request_fields())
        again, created_again = store.insert_report_request(actor="key:k1", retention_s=3600, id="rr_2",
                                                           **request_fields())
        assert created and not created_again and again.id == request.id == "rr_1" and again.current
        assert store.get_report_request("rr_1") == request
        with pytest.raises(NotFound):
            store.get_report_request("rr_missing")
        assert store.request_jobs("rr_1") == []
        new = NewJob(tenant="t1", policy=JobPolicy(kind=Kind.REPORT), report_request_id="rr_1")
        job, _ = store.submit(new)
        assert [j.id for j in store.request_jobs("rr_1")] == [job.id]
        assert [r.id for r in store.list_report_requests("t1")] == ["rr_1"]
        assert store.list_report_requests("t2") == []

    def test_a_correction_supersedes_the_current_request(self, store) -> None:  # type: ignore[no-untyped-def]
        add_template(store)
        old, _ = store.insert_report_request(actor="op", retention_s=3600, id="rr_1", **request_fields())
        new, created = store.supersede_report_request(old, actor="op", retention_s=3600, reason="corrected",
                                                      id="rr_2", **request_fields(data_sha256="e" * 64))
        assert created and new.supersedes == "rr_1" and new.revision == 2 and new.current
        replaced = store.get_report_request("rr_1")
        assert replaced.superseded_by == "rr_2" and not replaced.current

    def test_schedules_are_idempotent_and_only_move_forward(self, store) -> None:  # type: ignore[no-untyped-def]
        add_template(store)
        fields = dict(id="sch_1", tenant="t1", subject="patient-7", template_id="monthly", template_version=1,
                      day_of_month=3, catch_up_periods=2, variant=None, document_class="default",
                      processor="local", last_period="2026-10")
        schedule, created = store.insert_schedule(actor="op", **fields)
        same, created_again = store.insert_schedule(actor="op", **{**fields, "id": "sch_2"})
        assert created and not created_again and same.id == schedule.id == "sch_1"
        assert store.advance_schedule("sch_1", "2026-11", actor="scheduler", request_id="rr_1")
        assert not store.advance_schedule("sch_1", "2026-11", actor="scheduler")  # another one did it
        assert not store.advance_schedule("sch_1", "2026-09", actor="scheduler")  # never back
        assert store.get_schedule("sch_1").last_period == "2026-11"
        assert [s.id for s in store.list_schedules("t1")] == ["sch_1"] and store.list_schedules("t2") == []
        with pytest.raises(NotFound):
            store.get_schedule("sch_missing")
        actions = [e.action for e in store.audit_trail() if e.chain == "reports"]
        assert actions.count("schedule_created") == 1 and actions.count("schedule_run") == 1


class ProviderStoreContract:
    """Subclass this in a test module that provides `store` and `clock` fixtures (one store per dialect)."""

    def test_provider_jobs_are_claimed_only_by_their_processors(self, store) -> None:  # type: ignore[no-untyped-def]
        vendor, _ = store.submit(NewJob(tenant="t", policy=JobPolicy(kind=Kind.REPORT,
                                                                     report={"processor": "vendor"})))
        store.submit(NewJob(tenant="t", policy=JobPolicy()))
        assert store.claim_provider_jobs("d", []) == []
        assert store.claim_provider_jobs("d", ["other"], limit=10) == []
        (claim,) = store.claim_provider_jobs("d", ["vendor"], limit=10)
        assert (claim.job.id, claim.attempt, claim.worker) == (vendor.id, 1, "d")

    def test_observations_are_fenced_by_the_lease(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        job, _ = store.submit(NewJob(tenant="t", policy=JobPolicy(kind=Kind.REPORT, lease_ttl_s=30,
                                                                  report={"processor": "vendor"})))
        store.claim_provider_jobs("d", ["vendor"])
        assert store.provider_observation(job.id) is None
        first = store.record_provider_observation(job.id, 1, "d", provider="vendor", kind="submitted",
                                                  provider_job_id="p-1", status="queued", http_status=202)
        clock.advance(20)
        later = store.record_provider_observation(job.id, 1, "d", provider="vendor", kind="status",
                                                  provider_job_id="p-1", status="rendering")
        assert first.passes == 1 and later.passes == 2 and later.status == "rendering"
        assert (store.heartbeat(job.id, 1, "d") - clock.now()).total_seconds() == 30
        with pytest.raises(LeaseLost):
            store.record_provider_observation(job.id, 1, "other", provider="vendor", kind="status")
        with pytest.raises(LeaseLost):
            store.finish_provider_observation(job.id, 2, "d", "done", details={})
        store.finish_provider_observation(job.id, 1, "d", "done", details={"pages": 2})
        observed = store.provider_observation(job.id)
        assert observed is not None and observed.outcome == "done" and observed.provider_job_id == "p-1"
        assert store.audit_events(job.id)[-1].action == "provider_outcome"
