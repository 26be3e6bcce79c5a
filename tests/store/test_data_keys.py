"""The data-key queries of a rotation, on SQLite and PostgreSQL: the bounded batch of rows not under the
current key-encryption key (never a destroyed key, never a plaintext job), the replacement fenced on
the old wrapped key (zero rows: skipped, never an error), and the counts per key-encryption key."""

from __future__ import annotations

from typing import Any

from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.store.data_keys import StoredDataKey


def _job(store: Any, kek: str | None, wrapped: str | None = None) -> str:
    """A job whose row names `kek` of provider "local" (None: a plaintext job)."""
    new = NewJob(tenant="t1", policy=JobPolicy(), data_key_provider="local" if kek else None,
                 data_key_kek_id=kek, data_key_wrapped=wrapped if kek else None)
    job, _ = store.submit(new)
    return str(job.id)


def _destroy(store: Any, job_id: str) -> None:
    store.cancel(job_id, actor="test")
    store.tombstone(job_id, actor="test", request_id=None, reason="deletion_requested")


def test_rewrap_due_lists_only_live_keys_not_under_the_current_one(store: Any) -> None:
    old = [_job(store, "kek-a", f"w-a{i}") for i in range(3)]
    _job(store, "kek-b", "w-b0")  # already current
    _job(store, None)  # plaintext: nothing to re-wrap
    _destroy(store, old[1])  # its key is gone: nothing to re-wrap either
    due = store.rewrap_due("local", "kek-b", limit=10)
    assert [d.job_id for d in due] == sorted([old[0], old[2]])
    first = next(d for d in due if d.job_id == old[0])
    assert first == StoredDataKey(old[0], "t1", "local", "kek-a", "w-a0")
    # another provider counts as "not current" too (a move from local to aws-kms)
    assert len(store.rewrap_due("aws-kms", "arn:x", limit=10)) == 3


def test_rewrap_due_is_bounded_and_resumes_after_a_cursor(store: Any) -> None:
    ids = sorted(_job(store, "kek-a", f"w{i}") for i in range(5))
    first = store.rewrap_due("local", "kek-b", limit=2)
    assert [d.job_id for d in first] == ids[:2]
    second = store.rewrap_due("local", "kek-b", after=first[-1].job_id, limit=2)
    assert [d.job_id for d in second] == ids[2:4]
    assert [d.job_id for d in store.rewrap_due("local", "kek-b", after=ids[3], limit=2)] == ids[4:]


def test_replace_wrapped_key_is_fenced_on_the_old_key(store: Any) -> None:
    job_id = _job(store, "kek-a", "old")
    assert store.replace_wrapped_key(job_id, old="old", provider="local", kek_id="kek-b", wrapped="new")
    # a second pass that listed the row before the first stored: zero rows, nothing changes
    assert not store.replace_wrapped_key(job_id, old="old", provider="local", kek_id="kek-c", wrapped="x")
    assert store.count_data_keys() == {("local", "kek-b"): 1}
    assert store.rewrap_due("local", "kek-b", limit=10) == []
    assert [d.wrapped for d in store.rewrap_due("local", "kek-z", limit=10)] == ["new"]


def test_replace_wrapped_key_of_a_destroyed_key_is_skipped(store: Any) -> None:
    job_id = _job(store, "kek-a", "old")
    _destroy(store, job_id)
    assert not store.replace_wrapped_key(job_id, old="old", provider="local", kek_id="kek-b", wrapped="new")
    assert store.count_data_keys() == {}
    assert store.get(job_id).deleted_at is not None


def test_count_data_keys_per_key_encryption_key(store: Any) -> None:
    for kek, n in (("kek-a", 3), ("kek-b", 2)):
        for i in range(n):
            _job(store, kek, f"{kek}-{i}")
    _job(store, None)
    _destroy(store, _job(store, "kek-a", "gone"))
    assert store.count_data_keys() == {("local", "kek-a"): 3, ("local", "kek-b"): 2}
