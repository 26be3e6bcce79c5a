"""The webhook outbox: the events a terminal transition writes in its own transaction, and one pending
delivery per subscribed endpoint of the job's tenant. Payloads carry ids, state, error code, sha256,
page count and API paths; never document bytes, report data, keys or signed URLs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from docfence.core.ids import new_id
from docfence.core.states import JobState

Row = dict[str, Any]
#: Every event type an endpoint may subscribe to: each terminal state of a job and of a report request
#: (a report request ends when its newest job ends).
EVENT_TYPES = tuple(f"{subject}.{state.value}" for subject in ("job", "report_request")
                    for state in JobState if state.terminal)


class _Tx(Protocol):
    def send(self, name: str, **params: Any) -> None: ...


def append_outbox(tx: _Tx, events: Sequence[tuple[Row, dict[str, Any]]]) -> None:
    """Write the outbox rows of the terminal transitions among `events` (job row just updated, audit
    fields of its transition) in `tx`: they commit or roll back with the transition."""
    rows = [event for row, fields in events if JobState(fields["to_state"]).terminal
            for event in _events(row, fields)]
    if rows:  # two statements per transaction, not two per job: group commits stay cheap
        batch = json.dumps(rows, separators=(",", ":"))
        tx.send("insert_webhook_events", events=batch)
        tx.send("insert_webhook_deliveries", events=batch)


def _events(row: Row, fields: dict[str, Any]) -> list[dict[str, Any]]:
    job_id, state, at = row["id"], fields["to_state"], fields["at"]
    details = fields.get("details") or {}
    data: dict[str, Any] = {
        "job_id": job_id, "tenant": row["tenant"], "state": state, "attempt": row["attempt"],
        "kind": row["kind"], "document_class": row["document_class"], "mode": row["mode"],
        "error_code": row.get("last_error_code"), "reason": fields.get("reason"),
        "report_request_id": row.get("report_request_id"),
        "links": {"job": f"/v1/jobs/{job_id}", "events": f"/v1/jobs/{job_id}/events"},
    }
    if state == JobState.SUCCEEDED.value:
        data.update(sha256=details.get("sha256"), pages=details.get("pages"), bytes=details.get("bytes"))
        data["links"]["artifact"] = f"/v1/jobs/{job_id}/artifact"
    subjects = ["job"]
    if row.get("report_request_id"):
        data["links"]["report_request"] = f"/v1/report-requests/{row['report_request_id']}"
        subjects.append("report_request")
    return [_event(f"{subject}.{state}", row, data, at) for subject in subjects]


def _event(event_type: str, row: Row, data: dict[str, Any], at: datetime) -> dict[str, Any]:
    payload = {"type": event_type, "timestamp": at.isoformat(), "data": data}
    return {"id": new_id("msg"), "tenant": row["tenant"], "type": event_type, "job_id": row["id"],
            "attempt": row["attempt"], "report_request_id": row.get("report_request_id"),
            "payload": json.dumps(payload, sort_keys=True, separators=(",", ":")), "at": at.timestamp()}
