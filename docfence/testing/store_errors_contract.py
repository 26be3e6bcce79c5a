"""The store errors conformance suite: the same cause reaches callers as the same StoreError class and
code on every dialect (SQLite's and PostgreSQL's driver errors translated at the store's boundary).
Subclass it with `store`, `clock` and `tmp_path` fixtures (one store per dialect)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import StoreError, StoreUnavailable
from docfence.core.ids import new_id
from docfence.testing.job_store_contract import submit
from docfence.testing.stores import disk_full, disk_full_error, holding_job_row, unreachable, with_lock_bound


class StoreErrorsContract:
    """Each test provokes its cause for real through docfence/testing/stores.py, except PostgreSQL's
    full disk (checked through its translation: a test cannot fill the server's disk)."""

    def test_a_unique_violation_is_a_plain_store_error(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        key = new_id("key")
        store.insert_api_key(key, tenant="t1", name="a", scopes=(), key_hash="h" * 64, actor="op")
        with pytest.raises(StoreError) as caught:
            store.insert_api_key(key, tenant="t1", name="b", scopes=(), key_hash="g" * 64, actor="op")
        assert type(caught.value) is StoreError and caught.value.code == "store_error"
        assert not caught.value.retryable and "unique constraint" in caught.value.message
        assert store.get_api_key(key).name == "a"  # nothing of the refused write stayed
        assert store.insert_api_key(new_id("key"), tenant="t1", name="c", scopes=(), key_hash="f" * 64,
                                    actor="op").name == "c"  # and the store goes on

    def test_a_lock_held_past_the_writers_bound_is_store_unavailable(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        job = submit(store, lease_ttl_s=30)
        (claim,) = store.claim("w")
        impatient = with_lock_bound(store, 0.05)
        clock.advance(5)
        try:
            with holding_job_row(store, job), pytest.raises(StoreUnavailable) as caught:
                impatient.heartbeat(job, claim.attempt, "w")
            assert type(caught.value) is StoreUnavailable and caught.value.code == "store_unavailable"
            assert caught.value.retryable and "nothing was written" in caught.value.message
            assert store.get(job).heartbeat_at == claim.job.heartbeat_at  # the refused beat wrote nothing
            renewed = impatient.heartbeat(job, claim.attempt, "w")  # the lock is free again
            assert renewed == clock.now() + timedelta(seconds=30)
        finally:
            impatient.close()

    def test_an_unreachable_database_is_store_unavailable(self, store, tmp_path) -> None:  # type: ignore[no-untyped-def]
        gone = unreachable(store, tmp_path / "not-a-database")
        try:
            with pytest.raises(StoreUnavailable) as caught:
                gone.now()
        finally:
            gone.close()
        assert type(caught.value) is StoreUnavailable and caught.value.retryable

    def test_a_full_disk_is_store_unavailable_naming_no_space(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        translated = disk_full_error(store)
        assert type(translated) is StoreUnavailable and "no space left" in translated.message
        with disk_full(store) as real:
            if real:
                with pytest.raises(StoreUnavailable) as caught:
                    for _ in range(50):  # the first write that needs a new page
                        submit(store)
                assert "no space left" in caught.value.message
        submit(store)  # space again: the store goes on

