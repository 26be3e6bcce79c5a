"""The AuditLog conformance suite: every transition and every recorded event extends a hash chain that
verifies (job chains and named chains), read back in order. Subclass it with `store` and `clock`."""

from __future__ import annotations

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import NotFound
from docfence.core.policy import Mode
from docfence.core.states import ALLOWED_PAIRS, JobState
from docfence.store.audit import verify_events
from docfence.testing.job_store_contract import art, submit


class AuditLogContract:
    """Subclass this in a test module that provides `store` and `clock` fixtures (one store per dialect)."""

    def test_reads_and_audit_trail(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        job_id = submit(store)
        store.claim("w")
        clock.advance(1)
        store.complete(job_id, 1, "w", art(job_id, 1))
        other = submit(store, mode=Mode.RASTER)
        assert [j.id for j in store.list_jobs(state=JobState.SUCCEEDED)] == [job_id]
        assert [j.id for j in store.list_jobs(mode="raster")] == [other]
        assert len(store.list_jobs(tenant="t1", limit=1)) == 1
        events = store.audit_events(job_id)
        assert [(e.from_state, e.to_state) for e in events] == [
            (None, "queued"), ("queued", "rendering"), ("rendering", "succeeded")]
        assert all((JobState(e.from_state) if e.from_state else None, JobState(e.to_state)) in ALLOWED_PAIRS
                   for e in events)
        assert [e.attempt for e in events] == [0, 1, 1] and events[2].actor == "w"
        store.record_event("download", actor="key_1", job_id=job_id, details={"bytes": 10})
        result = verify_events(store.iter_audit(), store.audit_heads())
        assert result.ok, result.problem
        attempts = store.attempts(job_id)
        assert len(attempts) == 1 and attempts[0].worker == "w"
        assert attempts[0].outcome == "artifact_committed"
        with pytest.raises(NotFound):
            store.get("job_nope")

    def test_named_chains_verify_and_their_heads_catch_a_missing_last_event(self, store) -> None:  # type: ignore[no-untyped-def]
        first = store.record_event("config_changed", actor="op", details={"k": 1})
        second = store.record_event("config_changed", actor="op", reason="again", chain="operations")
        other = store.record_event("report_note", actor="op", chain="reports")
        assert (first.chain, first.chain_seq, first.prev_hash) == ("operations", 1, "")
        assert (second.chain_seq, second.prev_hash) == (2, first.hash)
        assert (other.chain, other.chain_seq) == ("reports", 1)
        trail = store.audit_trail()
        assert [(e.chain, e.chain_seq) for e in trail] == [
            ("operations", 1), ("operations", 2), ("reports", 1)]
        assert [e.seq for e in trail] == sorted(e.seq for e in trail)
        assert store.audit_heads()["operations"] == (2, second.hash)
        assert verify_events(store.iter_audit(page=1), store.audit_heads()).ok
        assert not verify_events(trail[:1] + trail[2:], store.audit_heads()).ok  # the head names event 2
        with pytest.raises(NotFound):
            store.record_event("download", actor="k", job_id="job_missing")

    def test_audit_trail_pages_after_a_sequence_number(self, store) -> None:  # type: ignore[no-untyped-def]
        events = [store.record_event("config_changed", actor="op", details={"i": i}) for i in range(5)]
        everything = store.audit_trail()
        assert [e.hash for e in everything] == [e.hash for e in events]
        page = store.audit_trail(after_seq=everything[1].seq, limit=2)
        assert [e.details for e in page] == [{"i": 2}, {"i": 3}]
        assert [e.hash for e in store.iter_audit(page=2)] == [e.hash for e in events]
