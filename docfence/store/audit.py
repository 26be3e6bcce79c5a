"""The audit trail's hash chain: how an event's hash is computed and how a trail is verified.

Each job has its own chain (serialised by the job row's lock); events without a job use named chains.
An event commits to the previous event of its chain, so an edit, removal or reordering breaks a link.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from docfence.core.records import AuditEvent

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


def event_hash(prev_hash: str, chain: str, chain_seq: int, fields: Mapping[str, Any]) -> str:
    """sha256 over the previous hash and a canonical JSON of the event's fields."""
    body = {
        "chain": chain,
        "chain_seq": chain_seq,
        "job_id": fields.get("job_id"),
        "attempt": fields.get("attempt"),
        "actor": fields["actor"],
        "action": fields["action"],
        "from": fields.get("from_state"),
        "to": fields.get("to_state"),
        "reason": fields.get("reason"),
        "at": micros(fields["at"]),
        "details": fields.get("details") or {},
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256((prev_hash + "\n" + canonical).encode()).hexdigest()


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    events: int
    chains: int
    first_bad_seq: int | None = None
    problem: str | None = None


def verify_events(events: Iterable[AuditEvent], heads: Mapping[str, tuple[int, str]]) -> VerifyResult:
    """Walk events in `seq` order; each must extend its chain. Heads catch a removed last event."""
    last: dict[str, tuple[int, str]] = {}
    count = 0
    for ev in events:
        count += 1
        chain = ev.chain
        prev_seq, prev_hash = last.get(chain, (0, ""))
        problem = _check_link(ev, chain, prev_seq, prev_hash)
        if problem:
            return VerifyResult(False, count, len(last), ev.seq, problem)
        last[chain] = (ev.chain_seq, ev.hash)
    for chain, (seq, head_hash) in heads.items():
        if last.get(chain, (0, "")) != (seq, head_hash):
            last_seen = last.get(chain, (0, ""))[0]
            return VerifyResult(
                False, count, len(last), None,
                f"chain {chain} ends at event number {last_seen}, but its head records {seq}",
            )
    return VerifyResult(True, count, len(last))


def _check_link(ev: AuditEvent, chain: str, prev_seq: int, prev_hash: str) -> str | None:
    if ev.chain_seq != prev_seq + 1:
        return f"event {ev.seq} is number {ev.chain_seq} of chain {chain}, expected {prev_seq + 1}"
    if ev.prev_hash != prev_hash:
        return f"event {ev.seq} does not follow the previous event of chain {chain}"
    fields = {
        "job_id": ev.job_id, "attempt": ev.attempt, "actor": ev.actor, "action": ev.action,
        "from_state": ev.from_state, "to_state": ev.to_state, "reason": ev.reason, "at": ev.at,
        "details": ev.details,
    }
    if event_hash(ev.prev_hash, chain, ev.chain_seq, fields) != ev.hash:
        return f"event {ev.seq} was altered (its hash does not match its content)"
    return None
