"""A failed attempt's validation report is kept on its attempt row, in the transaction of its failure,
on SQLite and PostgreSQL: written once (evidence is never overwritten), never by a stale attempt, and
bounded by the worker to 16 KiB."""

from __future__ import annotations

import json

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import StaleAttempt
from docfence.core.records import failed_validation
from docfence.core.states import JobState
from docfence.testing.job_store_contract import submit
from docfence.worker.failures import MAX_KEPT_VALIDATION, kept_validation

REPORT = {
    "ok": False, "mode": "vector", "level": "standard", "pages": 3, "notes": ["repaired by qpdf"],
    "checks": [
        {"name": "page_count", "ok": True, "failures": []},
        {"name": "annotations", "ok": False, "failures": ["page 3: annotations or links changed"],
         "details": ["page 3: /Annots 12 → 11"], "pages_marked": 3},
    ],
}


def test_a_validation_failure_keeps_its_report_on_the_attempt(store) -> None:  # type: ignore[no-untyped-def]
    job_id = submit(store)
    store.claim("w")
    kept = kept_validation(REPORT)
    job = store.fail(job_id, 1, "w", "validation_failed", "annotations: page 3: /Annots 12 → 11",
                     retryable=False, validation=kept)
    assert job.state is JobState.FAILED
    [attempt] = store.attempts(job_id)
    assert attempt.validation_report == json.loads(kept or "")
    shown = failed_validation(store.attempts(job_id))
    assert shown is not None and shown["attempt"] == 1
    [bad] = [c for c in shown["checks"] if not c["ok"]]
    assert bad["details"] == ["page 3: /Annots 12 → 11"]
    assert "notes" not in shown and "pages_marked" not in bad  # only outcomes, failures and details


def test_other_failures_keep_no_report(store) -> None:  # type: ignore[no-untyped-def]
    job_id = submit(store)
    store.claim("w")
    store.fail(job_id, 1, "w", "not_a_pdf", "The input is not a PDF file.", retryable=False)
    assert [a.validation for a in store.attempts(job_id)] == [None]
    assert failed_validation(store.attempts(job_id)) is None


def test_each_attempt_keeps_its_own_and_the_newest_explains_the_job(  # type: ignore[no-untyped-def]
    store, clock: FakeClock
) -> None:
    job_id = submit(store, max_attempts=3, retry_backoff_s=1)
    store.claim("w")
    first = kept_validation(REPORT)
    store.fail(job_id, 1, "w", "validation_failed", "annotations", retryable=True, validation=first)
    clock.advance(1)
    store.claim("w")
    store.fail(job_id, 2, "w", "render_timeout", "took too long", retryable=True)
    one, two = store.attempts(job_id)
    assert one.validation == first and two.validation is None  # attempt 1's evidence stays
    assert failed_validation([one, two]) is None  # the job's last error is attempt 2's: no report
    clock.advance(2)
    store.claim("w")
    second = kept_validation({**REPORT, "pages": 4})
    store.fail(job_id, 3, "w", "validation_failed", "annotations", retryable=True, validation=second)
    shown = failed_validation(store.attempts(job_id))
    assert shown is not None and shown["attempt"] == 3 and shown["pages"] == 4
    assert store.attempts(job_id)[0].validation == first


def test_a_stale_attempt_keeps_nothing(store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
    job_id = submit(store, lease_ttl_s=10, max_attempts=3)
    store.claim("old")
    clock.advance(11)
    store.requeue_expired()
    store.claim("new")
    with pytest.raises(StaleAttempt):
        store.fail(job_id, 1, "old", "validation_failed", "x", retryable=False,
                   validation=kept_validation(REPORT))
    assert [a.validation for a in store.attempts(job_id)] == [None, None]


def test_the_kept_report_is_bounded_and_says_what_it_left_out() -> None:
    many = [{"name": f"check_{i}", "ok": False, "failures": ["f" * 200] * 10, "details": ["d" * 200] * 10}
            for i in range(20)]
    passing = [{"name": f"fine_{i}", "ok": True, "failures": []} for i in range(5)]
    text = kept_validation({"ok": False, "mode": "vector", "checks": passing + many})
    assert text is not None and len(text.encode()) <= MAX_KEPT_VALIDATION
    kept = json.loads(text)
    assert kept["trimmed"] == "one detail per failed check"
    assert [c["name"] for c in kept["checks"]] == [c["name"] for c in many]
    assert all(c["details"] == ["d" * 200] for c in kept["checks"])
    small = json.loads(kept_validation(REPORT) or "")
    assert "trimmed" not in small and len(small["checks"]) == 2
    assert kept_validation(None) is None and kept_validation({}) is None
