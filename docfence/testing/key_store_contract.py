"""The KeyStore conformance suite: API keys are stored as hashes with their tenant and scopes, listed
per tenant, revoked once (the first revocation time stays), and every change is audited."""

from __future__ import annotations

import pytest

from docfence.core.clock import FakeClock
from docfence.core.errors import NotFound
from docfence.core.ids import new_id


class KeyStoreContract:
    """Subclass this in a test module that provides `store` and `clock` fixtures (one store per dialect).
    Keys and tenants get fresh names: a store's API keys outlive the tests' table resets."""

    def test_keys_round_trip_by_id_and_tenant(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        a, b, t1, t2 = new_id("key"), new_id("key"), new_id("t"), new_id("t")
        made = store.insert_api_key(a, tenant=t1, name="ci", scopes=("jobs.submit", "jobs.read"),
                                    key_hash="h" * 64, actor="op")
        store.insert_api_key(b, tenant=t2, name="ops", scopes=(), key_hash="g" * 64, actor="op")
        assert (made.id, made.tenant, made.name, made.scopes) == (a, t1, "ci", ("jobs.submit", "jobs.read"))
        assert made.key_hash == "h" * 64 and made.revoked_at is None and made.created_at == clock.now()
        assert store.get_api_key(a) == made
        assert store.get_api_key(new_id("key")) is None
        assert store.get_api_key(b).scopes == ()
        assert [k.id for k in store.list_api_keys(t1)] == [a]
        assert {a, b} <= {k.id for k in store.list_api_keys()}

    def test_revocation_keeps_its_first_time_and_is_audited(self, store, clock: FakeClock) -> None:  # type: ignore[no-untyped-def]
        a, tenant = new_id("key"), new_id("t")
        store.insert_api_key(a, tenant=tenant, name="ci", scopes=("jobs.read",), key_hash="h" * 64,
                             actor="op")
        first = store.revoke_api_key(a, actor="op")
        assert first.revoked_at == clock.now()
        clock.advance(5)
        assert store.revoke_api_key(a, actor="op").revoked_at == first.revoked_at
        assert store.get_api_key(a).revoked_at == first.revoked_at
        with pytest.raises(NotFound):
            store.revoke_api_key(new_id("key"), actor="op")
        events = [e for e in store.audit_trail() if e.chain == "operations"]
        assert [e.action for e in events] == ["api_key_created", "api_key_revoked", "api_key_revoked"]
        assert events[0].details == {"key_id": a, "tenant": tenant, "scopes": ["jobs.read"]}
        assert all("h" * 64 not in str(e.details) for e in events)  # the hash never reaches the trail
