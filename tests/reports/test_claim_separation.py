"""Provider-rendered report jobs belong to the dispatcher: `claim_provider_jobs` takes only them, and
normal workers (`claim`) must never take them: the claim query skips report jobs whose processor is
not `local`."""

from __future__ import annotations

from docfence.core.policy import JobPolicy, Kind
from docfence.core.records import NewJob
from docfence.store.sqlstore import SqlStore


def submit_three(store: SqlStore) -> None:
    for job_id, processor in (("j-vendor", "vendor"), ("j-local", "local"), ("j-watermark", None)):
        kind = Kind.REPORT if processor else Kind.WATERMARK
        report = {"processor": processor} if processor else None
        store.submit(NewJob(tenant="t", policy=JobPolicy(kind=kind, report=report), job_id=job_id))


def test_dispatcher_claims_only_provider_jobs(rstore: SqlStore) -> None:
    submit_three(rstore)
    assert rstore.claim_provider_jobs("d", ["other"], limit=10) == []
    (claim,) = rstore.claim_provider_jobs("d", ["vendor"], limit=10)
    assert claim.job.id == "j-vendor" and claim.attempt == 1
    assert [e.action for e in rstore.audit_events("j-vendor")] == ["submitted", "lease_acquired"]
    assert [a.worker for a in rstore.attempts("j-vendor")] == ["d"]


def test_workers_never_claim_provider_jobs(rstore: SqlStore) -> None:
    submit_three(rstore)
    assert sorted(c.job.id for c in rstore.claim("w", limit=10)) == ["j-local", "j-watermark"]
