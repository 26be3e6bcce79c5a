"""The store errors conformance suite (docfence/testing/store_errors_contract.py), run unchanged against
SQLite and PostgreSQL through the `store` and `clock` fixtures (tests/conftest.py)."""

from __future__ import annotations

from docfence.testing.store_errors_contract import StoreErrorsContract


class TestStoreErrors(StoreErrorsContract):
    pass
