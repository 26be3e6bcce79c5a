"""`inspect`: why is this job still in progress? One job's state, lease and deadline by the store's clock,
its timeline, what happens next, and (PostgreSQL) which database session holds its row lock when one
keeps the reconciler away. Shared by `docfence inspect` and the console; never document content."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

from docfence.core.fields import CALLER_FIELDS
from docfence.core.marks import HIDDEN, marks_view
from docfence.core.records import Artifact, Attempt, AuditEvent, Job, failed_validation, key_fingerprint
from docfence.core.states import JobState
from docfence.store.base import AuditLog, JobStore, OpsStore, ProviderStore
from docfence.store.passes import RowLockHolder


class InspectStore(JobStore, AuditLog, OpsStore, ProviderStore, Protocol):
    """What one job's inspection reads: the job, its attempts and audit events, pauses and leases, and
    the last provider observation of a provider-rendered report job."""


QUEUE_SCAN = 1000  # queued jobs examined to count those ahead of this one
_OBSERVATION_FIELDS = ("provider", "provider_job_id", "status", "kind", "http_status", "observed_at",
                       "passes", "outcome", "attempt")


@dataclass(frozen=True)
class Inspection:
    job: Job
    now: datetime  # the store's clock
    attempts: list[Attempt]
    events: list[AuditEvent]
    artifact: Artifact | None
    observation: dict[str, Any] | None
    paused: list[str]
    queued_ahead: int | None  # None unless queued; counted over at most QUEUE_SCAN queued jobs
    queued_ahead_capped: bool
    valid_leases: int
    next_steps: list[str]
    lock_holders: list[RowLockHolder] = field(default_factory=list)  # sessions holding the job's row


def inspect_job(store: InspectStore, job_id: str) -> Inspection:
    """Raises NotFound for an unknown job."""
    job = store.get(job_id)
    now = store.now()
    paused = store.paused_scopes()
    ahead, capped = _queued_ahead(store, job) if job.state is JobState.QUEUED else (None, False)
    valid = store.valid_lease_count() if not job.terminal else 0
    ins = Inspection(job=job, now=now, attempts=store.attempts(job_id), events=store.audit_events(job_id),
                     artifact=store.artifact(job_id), observation=_observation(store, job_id), paused=paused,
                     queued_ahead=ahead, queued_ahead_capped=capped, valid_leases=valid, next_steps=[],
                     lock_holders=store.row_lock_holders(job_id) if not job.terminal else [])
    return _with_steps(ins)


def _with_steps(ins: Inspection) -> Inspection:
    from dataclasses import replace

    return replace(ins, next_steps=next_steps(ins))


def _queued_ahead(store: JobStore, job: Job) -> tuple[int, bool]:
    """Jobs a claim takes before this one (claims go by run_after, then id)."""
    queued = store.list_jobs(state=JobState.QUEUED, limit=QUEUE_SCAN)
    mine = (job.run_after, job.id)
    return sum(1 for j in queued if (j.run_after, j.id) < mine), len(queued) >= QUEUE_SCAN


def _observation(store: ProviderStore, job_id: str) -> dict[str, Any] | None:
    """The report pipeline's last provider observation of the job, if it has one."""
    obs = store.provider_observation(job_id)
    if obs is None:
        return None
    data = asdict(obs)
    return {k: data.get(k) for k in _OBSERVATION_FIELDS}


def seconds(delta_from: datetime, delta_to: datetime) -> float:
    return (delta_to - delta_from).total_seconds()


def human(secs: float) -> str:
    secs = abs(secs)
    if secs < 120:
        return f"{secs:.0f} s"
    if secs < 7200:
        minutes, rest = divmod(round(secs), 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    return f"{secs / 3600:.1f} h"


def next_steps(ins: Inspection) -> list[str]:
    """Plain sentences: what the system will do with this job next, and why it is where it is."""
    job, now = ins.job, ins.now
    if job.terminal:
        why = f" ({job.last_error_code})" if job.last_error_code else ""
        return [f"terminal: {job.state.value}{why}; nothing further will happen to this job"]
    steps = _queued_steps(ins) if job.state is JobState.QUEUED else _rendering_steps(ins)
    left = seconds(now, job.deadline_at)
    if left > 0:
        steps.append(f"deadline in {human(left)}: it will be canceled then if still not done")
    elif ins.lock_holders:
        steps.append(f"deadline passed {human(left)} ago: the reconciler will cancel it once the session "
                     "holding its row lets go (below)")
    else:
        steps.append(f"deadline passed {human(left)} ago: the reconciler will cancel it on its next pass"
                     " (if this persists, no reconciler is running)")
    expired = job.lease_expires_at is not None and job.lease_expires_at <= now
    if left <= 0 or (job.state is JobState.RENDERING and expired):  # the reconciler's to move
        steps.extend(_holder_steps(ins.lock_holders))
    return steps


def _holder_steps(holders: list[RowLockHolder]) -> list[str]:
    """Who keeps the reconciler away from this job: the passes skip a locked row (SKIP LOCKED) and
    escalate only after a lease, and the server ends a docfence session idle in a transaction sooner."""
    return [f"the job's row is locked by database session {h.pid} ({h.application_name or 'no name'}, "
            f"{h.state} for {human(h.state_s)}, in its transaction for {human(h.transaction_s)}): the "
            "reconciler skips locked rows and waits for this one after a lease; a docfence session idle "
            "in a transaction is ended by the server sooner, so one that persists is not docfence's or "
            f"runs without its limits (end it: SELECT pg_terminate_backend({h.pid}))" for h in holders]


def _queued_steps(ins: Inspection) -> list[str]:
    job, now = ins.job, ins.now
    steps: list[str] = []
    wait = seconds(now, job.run_after)
    if wait > 0:
        steps.append(f"retry backoff: claimable in {human(wait)} (next claim makes attempt "
                     f"{job.attempt + 1} of {job.max_attempts})")
    ahead = "" if ins.queued_ahead is None else f"{ins.queued_ahead}{'+' if ins.queued_ahead_capped else ''}"
    steps.append(f"queued behind {ahead or 0} job(s); the next claim makes attempt {job.attempt + 1} "
                 f"of {job.max_attempts}")
    blocking = [s for s in ins.paused if s in ("all", job.mode)]
    if blocking:
        steps.append(f"claims paused for {', '.join(blocking)}: nothing will claim it until "
                     f"`docfence ops resume{'' if blocking[0] == 'all' else ' --mode ' + job.mode}`")
    elif wait <= 0 and ins.valid_leases == 0 and ins.queued_ahead == 0:
        steps.append("no worker holds any lease and this job is next: check that workers are running")
    return steps


def _rendering_steps(ins: Inspection) -> list[str]:
    job, now = ins.job, ins.now
    owner = job.lease_owner or "nobody"
    beat = f"; last heartbeat {human(seconds(job.heartbeat_at, now))} ago" if job.heartbeat_at else ""
    if job.lease_expires_at is not None and job.lease_expires_at > now:
        return [f"attempt {job.attempt} of {job.max_attempts} is rendering on {owner}; lease valid for "
                f"{human(seconds(now, job.lease_expires_at))}{beat}"]
    ago = human(seconds(job.lease_expires_at, now)) if job.lease_expires_at else "?"
    if job.attempt < job.max_attempts:
        then = (f"the reconciler will requeue it on its next pass, attempt {job.attempt + 1} of "
                f"{job.max_attempts}")
    else:
        then = (f"the reconciler will fail it on its next pass: attempts exhausted "
                f"({job.attempt} of {job.max_attempts})")
    if ins.lock_holders:  # the reconciler runs, but a session keeps it away (said in the steps below)
        return [f"lease expired {ago} ago (held by {owner}{beat}); {then}, once the session holding its "
                "row lets go"]
    return [f"lease expired {ago} ago (held by {owner}{beat}); {then}",
            "if this persists, no reconciler is running (`docfence reconcile` or a worker with it)"]


def timeline(ins: Inspection, recipient_visible: bool = False) -> list[dict[str, Any]]:
    """The audit events; recipient, purpose and reference in their details only when visible."""
    def details(e: AuditEvent) -> dict[str, Any]:
        if recipient_visible:
            return e.details
        return {k: HIDDEN if k in CALLER_FIELDS else v for k, v in e.details.items()}

    return [{"seq": e.chain_seq, "at": e.at.isoformat(), "attempt": e.attempt, "actor": e.actor,
             "action": e.action, "from": e.from_state, "to": e.to_state, "reason": e.reason,
             "details": details(e)} for e in ins.events]


def marks_lines(ins: Inspection, recipient_visible: bool) -> list[str]:
    """`docfence inspect`'s lines on the job's marks and the field values frozen with it."""
    view = marks_view(ins.job.policy, recipient_visible=recipient_visible)
    lines = []
    for k, mark in enumerate(view["marks"], start=1):
        used = f" (fields {', '.join(mark['fields'])})" if mark["fields"] else ""
        if mark["kind"] == "image":
            what = "image"
        elif mark["text"] is None:
            what = f"text {HIDDEN}{used}"
        else:
            what = json.dumps(mark["text"], ensure_ascii=False)
        lines.append(f"{'marks' if k == 1 else '':<10} {k}. {what} {mark['position']}, "
                     f"pages {mark['pages']}, {mark['layer']}, opacity {mark['opacity']:g}")
    if view["fields"]:
        lines.append("fields     " + ", ".join(f"{k} {v}" for k, v in sorted(view["fields"].items())))
    return lines


def _at(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "-"
    delta = seconds(now, value)
    rel = f"in {human(delta)}" if delta > 0 else f"{human(delta)} ago"
    return f"{value.isoformat(timespec='seconds')} ({rel})"


def validation_summary(artifact: Artifact | None) -> dict[str, Any] | None:
    """The published artifact's report: check names, outcomes, failure messages and details."""
    if artifact is None or not artifact.validation:
        return None
    return report_summary(artifact.validation)


def report_summary(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """Check names, outcomes, their (generic) failure messages and a failed check's details (which
    page, what differed: never document text), capped as the validator caps them; `attempt` when the
    report is a failed attempt's (core.records.failed_validation)."""
    if not report:
        return None
    checks = [{"name": str(c.get("name")), "ok": bool(c.get("ok")),
               "failures": [str(f)[:200] for f in c.get("failures", [])][:10],
               "details": [str(d)[:200] for d in c.get("details", [])][:10]}
              for c in report.get("checks", []) if isinstance(c, dict)]
    summary = {"ok": bool(report.get("ok")), "mode": report.get("mode"), "pages": report.get("pages"),
               "checks": checks}
    if "attempt" in report:
        summary["attempt"] = report["attempt"]
    return summary


def job_validation(ins: Inspection) -> dict[str, Any] | None:
    """The published artifact's report, else the report of the newest attempt when it failed
    validation."""
    return validation_summary(ins.artifact) or report_summary(failed_validation(ins.attempts))


_CODE_CHECKS = ("verification_code_structure", "verification_code_decodes")
_SIGNATURE_CHECKS = ("signature_valid", "signature_covers_file")


def issue_status(job: Job, artifact: Artifact | None) -> dict[str, Any]:
    """The job's verification code and signature: None when its class has neither, else the pages or
    visibility asked for and "ok" / "failed" (from the published validation report) or "not issued"."""
    checks = {str(c.get("name")): c for c in (artifact.validation.get("checks", []) if artifact else [])
              if isinstance(c, dict)}

    def status(names: tuple[str, ...]) -> str:
        found = [checks[n] for n in names if n in checks]
        if not found:
            return "not issued"
        return "ok" if len(found) == len(names) and all(c.get("ok") for c in found) else "failed"

    code, sig = job.policy.verification, job.policy.signing
    signer = str(checks.get("signature_valid", {}).get("signer", "")) or None
    return {
        "verification": None if code is None else {"pages": code.pages, "url": code.url,
                                                    "status": status(_CODE_CHECKS)},
        "signature": None if sig is None else {"visible": sig.visible, "signer": signer,
                                               "status": status(_SIGNATURE_CHECKS)},
    }


def encryption_status(ins: Inspection) -> dict[str, Any]:
    """Whether the job's bytes are sealed, by which key provider and key-encryption key (its
    fingerprint, never its id or the key), and when deletion destroyed its data key; from the row,
    never by reading the bytes. Not sealed: a job stored before encryption (or with it off)."""
    job = ins.job
    if job.data_key_provider is None:
        return {"sealed": False, "provider": None, "kek": None, "key_destroyed_at": None}
    destroyed = None
    if job.data_key_wrapped is None:  # the tombstone's UPDATE destroyed it, in the bytes_deletion event
        found = [e.at for e in ins.events if e.action == "bytes_deletion" and e.details.get("key_destroyed")]
        destroyed = found[-1] if found else job.deleted_at
    return {"sealed": True, "provider": job.data_key_provider,
            "kek": key_fingerprint(job.data_key_provider, job.data_key_kek_id or ""),
            "key_destroyed_at": iso(destroyed)}


def encryption_line(enc: dict[str, Any]) -> str:
    """`inspect`'s one line on encryption at rest (the console's job view says the same)."""
    if not enc["sealed"]:
        return "encryption plaintext (stored before encryption at rest)"
    gone = f"; data key destroyed {enc['key_destroyed_at']}" if enc["key_destroyed_at"] else ""
    return f"encryption sealed, provider {enc['provider']}, kek {enc['kek']}{gone}"


def format_inspection(ins: Inspection, recipient_visible: bool = False) -> str:
    """The one-screen answer printed by `docfence inspect JOB` (the marks' recipient, purpose and
    reference read "(hidden)" unless `recipient_visible`)."""
    job, now, p = ins.job, ins.now, ins.job.policy
    lines = [
        f"job {job.id}  tenant {job.tenant}  kind {job.kind}",
        f"state      {job.state.value}   attempt {job.attempt}/{job.max_attempts}",
        f"policy     mode {p.mode.value}, dpi {p.dpi}, class {p.document_class}, region {p.region}, "
        f"lease ttl {p.lease_ttl_s:g} s",
        f"created    {_at(job.created_at, now)}",
        f"deadline   {_at(job.deadline_at, now)}",
        f"lease      {job.lease_owner or '-'} until {_at(job.lease_expires_at, now)}",
        f"heartbeat  {_at(job.heartbeat_at, now)}",
        f"store now  {now.isoformat(timespec='seconds')}   paused: {', '.join(ins.paused) or 'nothing'}",
        encryption_line(encryption_status(ins)),
        *marks_lines(ins, recipient_visible),
    ]
    if job.last_error_code:
        lines.append(f"last error {job.last_error_code}: {job.last_error_message or ''}")
    if ins.observation:
        o = ins.observation
        lines.append(f"provider   {o['provider']} status {o['status'] or '-'} ({o['kind']}), "
                     f"observed {_at(o['observed_at'], now)}, {o['passes']} pass(es)")
    summary = job_validation(ins)
    if summary:
        bad = [c for c in summary["checks"] if not c["ok"]]
        of = f", attempt {summary['attempt']}" if "attempt" in summary else ""
        outcome = "ok" if summary["ok"] else "FAILED: " + ", ".join(c["name"] for c in bad)
        lines.append(f"validation {outcome} ({len(summary['checks'])} checks{of})")
        lines.extend(f"  {c['name']}: {d}" for c in bad for d in c["details"] or c["failures"])
    issued = issue_status(job, ins.artifact)
    if issued["verification"]:
        v = issued["verification"]
        lines.append(f"code       {v['status']} (pages {v['pages']}) {v['url']}")
    if issued["signature"]:
        s = issued["signature"]
        lines.append(f"signature  {s['status']} ({'visible' if s['visible'] else 'invisible'}"
                     f"{', ' + s['signer'] if s['signer'] else ''})")
    lines.append("attempts")
    for a in ins.attempts:
        lines.append(f"  #{a.attempt} {a.worker} claimed {_at(a.claimed_at, now)} -> "
                     f"{a.outcome or 'running'}{' ' + a.error_code if a.error_code else ''}")
    lines.append("timeline")
    for e in ins.events:
        move = f"{e.from_state or '-'} -> {e.to_state}" if e.from_state != e.to_state else ""
        note = e.details.get("note") if isinstance(e.details, dict) else None
        lines.append(f"  {e.at.isoformat(timespec='seconds')} #{e.attempt or 0} {e.action:<22} {move} "
                     f"by {e.actor}{f' ({note})' if note else ''}")
    lines.append("next")
    lines.extend(f"  {step}" for step in ins.next_steps)
    return "\n".join(lines)


def iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def inspection_dict(ins: Inspection, recipient_visible: bool = False) -> dict[str, Any]:
    """JSON-ready for the console: no input key, idempotency key, artifact storage key or wrapped data
    key; the marks' recipient, purpose and reference only when `recipient_visible`."""
    job, p = ins.job, ins.job.policy
    obs = {k: iso(v) for k, v in ins.observation.items()} if ins.observation else None
    return {
        "job": {"id": job.id, "tenant": job.tenant, "kind": job.kind, "state": job.state.value,
                "attempt": job.attempt, "max_attempts": job.max_attempts, "lease_owner": job.lease_owner,
                "lease_expires_at": iso(job.lease_expires_at), "heartbeat_at": iso(job.heartbeat_at),
                "deadline_at": iso(job.deadline_at), "created_at": iso(job.created_at),
                "finished_at": iso(job.finished_at), "run_after": iso(job.run_after),
                "last_error_code": job.last_error_code, "last_error_message": job.last_error_message,
                "input_bytes": job.input_bytes, "deleted": job.deleted_at is not None,
                "report_request_id": job.report_request_id},
        "policy": {"mode": p.mode.value, "dpi": p.dpi, "document_class": p.document_class,
                   "region": p.region, "deadline_s": p.deadline_s, "lease_ttl_s": p.lease_ttl_s},
        "now": ins.now.isoformat(),
        "attempts": [{"attempt": a.attempt, "worker": a.worker, "claimed_at": iso(a.claimed_at),
                      "ended_at": iso(a.ended_at), "outcome": a.outcome, "error_code": a.error_code}
                     for a in ins.attempts],
        "timeline": timeline(ins, recipient_visible),
        **marks_view(p, recipient_visible=recipient_visible),
        "observation": obs,
        "validation": job_validation(ins),
        "issue": issue_status(job, ins.artifact),  # verification code and signature
        "artifact": _artifact(ins.artifact),
        "encryption": encryption_status(ins),
        "paused": ins.paused,
        "lock_holders": [asdict(h) for h in ins.lock_holders],
        "next_steps": ins.next_steps,
    }


def _artifact(artifact: Artifact | None) -> dict[str, Any] | None:
    if artifact is None:
        return None
    return {"attempt": artifact.attempt, "pages": artifact.pages, "bytes": artifact.bytes,
            "sha256": artifact.sha256}
