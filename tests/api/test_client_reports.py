"""The Python client's report calls against a live server, on both stores: request (idempotent), a
conflicting re-request, supersede with corrected data, get, and retry after the job failed."""

from __future__ import annotations

import pytest

from docfence.client import Conflict
from docfence.reports import Templates
from docfence.reports.templates import TemplateBundle

from .conftest import ApiEnv

SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}


def test_request_get_supersede_and_retry_a_report(any_env: ApiEnv) -> None:
    bundle = TemplateBundle(name="t", html="<p>{{ total }}</p>", css="", assets={}, schema=SCHEMA)
    Templates(any_env.store).create_version("acme-monthly", bundle, actor="test", owner="acme")
    with any_env.client(any_env.key(scopes=("submit", "read"))) as client:
        first = client.request_report("clinic-1", "2026-10", "acme-monthly@1", {"total": 1})
        again = client.request_report("clinic-1", "2026-10", "acme-monthly@1", {"total": 1})
        assert again["id"] == first["id"]
        with pytest.raises(Conflict) as conflict:
            client.request_report("clinic-1", "2026-10", "acme-monthly@1", {"total": 2})
        assert conflict.value.server_code == "idempotency_conflict"
        job_id = first["jobs"][-1]["id"]
        claim = any_env.claim(job_id)
        any_env.store.fail(job_id, claim.attempt, "test-worker", "render_resource_exceeded", "too slow",
                           retryable=False)
        assert client.get_report(first["id"])["jobs"][-1]["state"] == "failed"
        retried = client.retry_report(first["id"])
        assert retried.state == "queued" and retried.id != job_id
        any_env.store.cancel(retried.id, actor="test")
        fixed = client.supersede_report("clinic-1", "2026-10", "acme-monthly@1", {"total": 2})
        assert fixed["revision"] == 2 and fixed["supersedes"] == first["id"]
        assert client.get_report(first["id"])["superseded_by"] == fixed["id"]
