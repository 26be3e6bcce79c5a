"""The console's bulk cancel in two steps, on SQLite and PostgreSQL: the preview resolves the job
table's filters and search text (id, request id, label, filename) into exactly the queued and rendering
jobs the table selects, and the cancel ends exactly the confirmed ids, each audited with the required
reason; a job that arrives between the two is untouched, another tenant's ids are skipped as missing,
and an operator cancels across tenants (single and bulk) with a reason, audited as its key."""

from __future__ import annotations

from typing import Any

import httpx

from docfence.core.policy import JobPolicy
from docfence.core.records import Job, NewJob

from .conftest import ApiEnv


def _job(env: ApiEnv, tenant: str = "acme", label: str | None = None, filename: str | None = None) -> Job:
    job, created = env.store.submit(NewJob(tenant=tenant, policy=JobPolicy(), label=label, filename=filename))
    assert created
    return job


def _http(env: ApiEnv, tenant: str, scopes: tuple[str, ...]) -> tuple[httpx.Client, str]:
    record, key = env.service.create_api_key(tenant, scopes)
    http = httpx.Client(base_url=env.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return http, record.id


def _preview(http: httpx.Client, **filters: object) -> dict[str, Any]:
    answer = http.post("/console/api/cancel-matching/preview", json=filters)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _state(env: ApiEnv, job: Job) -> str:
    return env.store.get(job.id).state.value


def test_preview_resolves_the_search_text_as_the_table_does(any_env: ApiEnv) -> None:
    env = any_env  # the worker's part first: a claim takes every queued job
    done = env.finish(_job(env, label="deadline-demo").id)  # the table shows it; nothing to cancel
    running = _job(env, label="deadline-demo")
    env.claim(running.id)
    a1, a2 = _job(env, label="deadline-demo"), _job(env, label="deadline-demo", filename="a.pdf")
    other_label = _job(env, label="queued-demo")
    by_file = _job(env, filename="deadline-demo")  # a filename equal to the label: the label wins
    theirs = _job(env, tenant="other", label="deadline-demo")
    http, _ = _http(env, "acme", ("admin",))
    with http:
        table = http.get("/console/api/jobs", params={"job_id": "deadline-demo"}).json()["jobs"]
        assert {r["id"] for r in table} == {a1.id, a2.id, done.id, running.id}
        preview = _preview(http, job_id=" deadline-demo ")
        assert preview["count"] == 3 and preview["more"] is False
        assert set(preview["ids"]) == {a1.id, a2.id, running.id}
        assert [r["id"] for r in preview["rows"]] == preview["ids"]
        assert _preview(http, job_id="deadline-demo", state="rendering")["ids"] == [running.id]
        assert _preview(http, job_id="a.pdf")["ids"] == [a2.id]  # no label "a.pdf": the filename
        assert _preview(http, job_id=a1.id)["ids"] == [a1.id]  # a job id: that job
        assert _preview(http, job_id=done.id)["ids"] == []  # found, but it ended
        assert _preview(http, job_id=theirs.id)["ids"] == []  # another tenant's job is not found
        assert _preview(http, job_id="nothing-like-this")["count"] == 0
        assert set(_preview(http)["ids"]) == {a1.id, a2.id, other_label.id, by_file.id, running.id}
    assert {_state(env, j) for j in (a1, a2, other_label, by_file, theirs)} == {"queued"}  # nothing canceled


def test_cancel_ends_exactly_the_previewed_ids_with_the_reason(any_env: ApiEnv) -> None:
    env = any_env
    a1, a2 = _job(env, label="deadline-demo"), _job(env, label="deadline-demo")
    outside = _job(env, label="queued-demo")  # same state, another label: outside the filter
    http, key_id = _http(env, "acme", ("submit", "read"))
    with http:
        preview = _preview(http, job_id="deadline-demo")
        late = _job(env, label="deadline-demo")  # arrives after the preview, before the confirmation
        body = {"ids": preview["ids"]}
        missing = http.post("/console/api/cancel-matching", json=body)
        assert missing.status_code == 422  # the reason is required
        blank = http.post("/console/api/cancel-matching", json={**body, "reason": "   "})
        assert blank.status_code == 422 and blank.json()["error"]["field"] == "reason"
        assert {_state(env, j) for j in (a1, a2)} == {"queued"}
        answer = http.post("/console/api/cancel-matching", json={**body, "reason": "deadline demo rollback"})
        assert answer.status_code == 200, answer.text
    assert sorted(answer.json()["canceled"]) == sorted([a1.id, a2.id]) and answer.json()["skipped"] == []
    states = {j.id: _state(env, j) for j in (a1, a2, outside, late)}
    assert states == {a1.id: "canceled", a2.id: "canceled", outside.id: "queued", late.id: "queued"}
    for job in (a1, a2):
        event = next(e for e in env.store.audit_events(job.id) if e.to_state == "canceled")
        assert event.actor == f"key:{key_id}" and event.details.get("note") == "deadline demo rollback"


def test_a_tenant_key_cannot_cancel_another_tenants_ids_in_bulk(any_env: ApiEnv) -> None:
    env = any_env
    ended = env.finish(_job(env, label="x").id)  # first: a claim takes every queued job
    mine, theirs = _job(env, label="x"), _job(env, tenant="other", label="x")
    canceled_before = _job(env, label="x")
    env.store.cancel(canceled_before.id, actor="test")
    http, _ = _http(env, "acme", ("admin",))
    with http:
        ids = [mine.id, theirs.id, ended.id, canceled_before.id, "job_does_not_exist", mine.id]
        answer = http.post("/console/api/cancel-matching", json={"ids": ids, "reason": "cleanup"})
        assert answer.status_code == 200, answer.text
        too_many = http.post("/console/api/cancel-matching", json={"ids": [mine.id] * 201, "reason": "x"})
        assert too_many.status_code == 422  # bounded like the table (TABLE_LIMIT)
    assert answer.json()["canceled"] == [mine.id]
    assert answer.json()["skipped"] == [
        {"id": theirs.id, "why": "not_found"},  # as if missing: nothing about it is revealed
        {"id": ended.id, "why": "ended", "state": "succeeded"},
        {"id": canceled_before.id, "why": "ended", "state": "canceled"},
        {"id": "job_does_not_exist", "why": "not_found"},
    ]
    assert _state(env, theirs) == "queued"
    assert [e.action for e in env.store.audit_events(theirs.id)] == ["submitted"]


def test_a_read_key_may_neither_preview_nor_cancel(env: ApiEnv) -> None:
    job = _job(env)
    http, _ = _http(env, "acme", ("read",))
    with http:
        assert http.post("/console/api/cancel-matching/preview", json={}).status_code == 403
        refused = http.post("/console/api/cancel-matching", json={"ids": [job.id], "reason": "x"})
        assert refused.status_code == 403
    submit_only, _ = _http(env, "acme", ("submit",))
    with submit_only:  # it may cancel, but not list the console's table through the preview
        assert submit_only.post("/console/api/cancel-matching/preview", json={}).status_code == 403
    assert _state(env, job) == "queued"


def test_an_operator_cancels_across_tenants_with_a_reason_audited_as_its_key(any_env: ApiEnv) -> None:
    env = any_env
    acme, other, outside = _job(env, label="stuck"), _job(env, tenant="other", label="stuck"), _job(env)
    single = _job(env, tenant="third")
    http, key_id = _http(env, "operators", ("operator",))
    with http:
        assert http.get("/console/api/whoami").json()["can_cancel"] is True
        preview = _preview(http, job_id="stuck")
        assert sorted(preview["ids"]) == sorted([acme.id, other.id])
        assert {r["tenant"] for r in preview["rows"]} == {"acme", "other"}
        assert _preview(http, job_id="stuck", tenant="other")["ids"] == [other.id]
        answer = http.post("/console/api/cancel-matching", json={"ids": preview["ids"],
                                                                  "reason": "stuck after the outage"})
        assert sorted(answer.json()["canceled"]) == sorted([acme.id, other.id])
        no_reason = http.post(f"/v1/jobs/{single.id}/cancel")
        assert no_reason.status_code == 422 and no_reason.json()["error"]["field"] == "reason"
        assert _state(env, single) == "queued"
        one = http.post(f"/v1/jobs/{single.id}/cancel", params={"reason": "tenant asked by phone"})
        assert one.status_code == 200 and one.json()["state"] == "canceled"
        assert http.get(f"/v1/jobs/{single.id}").status_code == 403  # canceling is not reading
    assert _state(env, outside) == "queued"
    for job, note in ((acme, "stuck after the outage"), (other, "stuck after the outage"),
                      (single, "tenant asked by phone")):
        event = next(e for e in env.store.audit_events(job.id) if e.to_state == "canceled")
        assert (event.actor, event.from_state, event.details.get("note")) == (f"key:{key_id}", "queued", note)
