"""docs/webhooks.md shows every payload kind as it is sent: each terminal transition of a watermark job
and of a report job is made through the store (whose transaction writes the outbox row), delivered by
the real dispatcher to a loopback receiver that verifies its signature, and each documented example
must have the keys (top level, `data`, `data.links`) and the fixed values of the payload of its kind.
A kind the code sends that the page does not show fails, and so does an example of a kind it never sends."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from docfence.config import WebhooksConfig
from docfence.core.clock import FakeClock
from docfence.core.policy import JobPolicy, Kind
from docfence.core.records import ArtifactInfo, NewJob
from docfence.maintenance.webhook_endpoints import WebhookEndpoints
from docfence.maintenance.webhooks import WebhookDispatcher
from docfence.store.outbox import EVENT_TYPES
from docfence.testing.report_store_contract import add_template, request_fields
from docfence.testing.webhook_receiver import Receiver, receiving

DOC = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"
LOOPBACK = WebhooksConfig(allow_hosts=("127.0.0.1",), read_timeout_s=2.0, connect_timeout_s=2.0)
ENDINGS = ("succeeded", "failed", "canceled")
#: Values that are the same on every run of a kind (ids, hashes and times are not).
FIXED = ("state", "kind", "mode", "document_class", "error_code", "reason")
Payload = dict[str, Any]


def documented() -> dict[tuple[str, str], Payload]:
    """(event type, job kind) -> the example under each `<!-- payload: TYPE KIND -->` marker."""
    found: dict[tuple[str, str], Payload] = {}
    for match in re.finditer(r"<!-- payload: ([\w.]+) (watermark|report) -->\n```json\n(.*?)```",
                             DOC.read_text(), re.S):
        kind_of = (match.group(1), match.group(2))
        assert kind_of not in found, f"two examples of {kind_of}"
        found[kind_of] = json.loads(match.group(3))
    return found


def documented_request() -> Payload:
    """The body of the request shown under "What is sent" (a watermark job's `job.succeeded`)."""
    request = re.search(r"```\nPOST /docfence HTTP/1.1\n.*?\n\n(.*?)```", DOC.read_text(), re.S)
    assert request is not None, "the request under 'What is sent' is gone"
    body: Payload = json.loads(request.group(1))
    return body


def _report_job(store: Any, end: str) -> NewJob:
    request, _ = store.insert_report_request(actor="key:k1", retention_s=3600, id=f"rr_{end}",
                                             **request_fields(tenant="acme", subject=f"patient-{end}"))
    return NewJob(tenant="acme", policy=JobPolicy(kind=Kind.REPORT, deadline_s=60),
                  report_request_id=request.id)


def end_jobs(store: Any, clock: FakeClock) -> None:
    """One watermark and one report job per terminal state, each ended as production ends it: a
    committed artifact, a permanent error reported by the worker, a cancel request, the deadline."""
    add_template(store, owner="acme")
    jobs = {(kind, end): store.submit(NewJob(tenant="acme", policy=JobPolicy()) if kind == "watermark"
                                      else _report_job(store, end))[0]
            for kind in ("watermark", "report") for end in ("succeeded", "failed")}
    canceled = store.submit(NewJob(tenant="acme", policy=JobPolicy()))[0]
    store.cancel(canceled.id, actor="key:k1")
    claims = {c.job.id: c for c in store.claim("w1", limit=10)}
    assert set(claims) == {job.id for job in jobs.values()}
    for kind in ("watermark", "report"):
        job = jobs[kind, "succeeded"]
        store.complete(job.id, claims[job.id].attempt, "w1",
                       ArtifactInfo(f"jobs/acme/{job.id}/a/1.pdf", "9f" * 32, 48213, 12, {"ok": True}))
        job = jobs[kind, "failed"]
        code = "malformed_pdf" if kind == "watermark" else "template_error"
        store.fail(job.id, claims[job.id].attempt, "w1", code, "a safe message", retryable=False)
    late = store.submit(_report_job(store, "canceled"))[0]
    clock.advance(120)  # past the report job's 60 s deadline: the reconciler's pass cancels it
    assert [j.id for j in store.cancel_past_deadline()] == [late.id]


def delivered(store: Any, clock: FakeClock) -> dict[tuple[str, str], Payload]:
    """Every payload the dispatcher delivers for `end_jobs`, by (event type, job kind)."""
    receiver = Receiver(secret="")
    with receiving(receiver) as url:
        receiver.secret = WebhookEndpoints(store, LOOPBACK).create("acme", url, ["*"], actor="op").secret
        end_jobs(store, clock)
        dispatcher = WebhookDispatcher(store, LOOPBACK, worker="d1", rng=random.Random(7))
        for _ in range(12):  # each pass delivers what is due; a bounded number of passes, never a sleep
            if not dispatcher.run_once().delivered:
                break
    assert receiver.bad_signatures == 0
    by_kind: dict[tuple[str, str], Payload] = {}
    for payload in receiver.payloads.values():
        key = (payload["type"], payload["data"]["kind"])
        assert key not in by_kind, f"two deliveries of {key}"
        by_kind[key] = payload
    return by_kind


def shape(payload: Payload) -> tuple[list[str], list[str], list[str]]:
    return sorted(payload), sorted(payload["data"]), sorted(payload["data"]["links"])


def test_every_payload_kind_is_documented_with_its_keys_and_fixed_values(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    sent = delivered(store, clock)
    expected = {(f"{subject}.{end}", kind) for subject in ("job", "report_request") for end in ENDINGS
                for kind in ("watermark", "report") if subject == "job" or kind == "report"}
    assert set(sent) == expected and {t for t, _ in sent} == set(EVENT_TYPES)
    # a report job's job.* event carries the data of its report_request.* event, so the page shows one
    # of each pair and says the other is the same body
    for end in ENDINGS:
        assert sent[f"job.{end}", "report"]["data"] == sent[f"report_request.{end}", "report"]["data"]
    docs = documented()
    shown = set(docs) | {("job.succeeded", "watermark")}  # the request under "What is sent" is one
    assert shown <= expected, f"examples of kinds never sent: {sorted(shown - expected)}"
    missing = [f"job.{end} of a watermark job" for end in ENDINGS if (f"job.{end}", "watermark") not in shown]
    missing += [f"job.{end} or report_request.{end} of a report job" for end in ENDINGS
                if not {(f"job.{end}", "report"), (f"report_request.{end}", "report")} & shown]
    assert not missing, f"kinds sent but not shown in docs/webhooks.md: {missing}"
    assert ("job.succeeded", "report") in shown  # a report job's own event, links.report_request and all
    examples = list(docs.items())
    examples.append((("job.succeeded", "watermark"), documented_request()))
    for (event_type, kind), example in examples:
        actual = sent[event_type, kind]
        name = f"the {event_type} {kind} example"
        assert shape(example) == shape(actual), name
        assert example["type"] == actual["type"], name
        assert {f: example["data"][f] for f in FIXED} == {f: actual["data"][f] for f in FIXED}, name
        data = actual["data"]
        ids = {data["job_id"]: example["data"]["job_id"]}
        if data["report_request_id"]:
            ids[data["report_request_id"]] = example["data"]["report_request_id"]
        links = {}
        for link, path in data["links"].items():
            for real, shown_id in ids.items():
                path = path.replace(real, shown_id)
            links[link] = path
        assert example["data"]["links"] == links, name
