"""Every store capability's conformance suite (docfence/testing/*_contract.py), run unchanged against
SQLite and PostgreSQL through the `store` and `clock` fixtures (tests/conftest.py)."""

from __future__ import annotations

from docfence.testing.audit_log_contract import AuditLogContract
from docfence.testing.job_store_contract import JobStoreContract
from docfence.testing.key_store_contract import KeyStoreContract
from docfence.testing.ops_store_contract import OpsStoreContract
from docfence.testing.report_store_contract import ProviderStoreContract, ReportStoreContract
from docfence.testing.webhook_store_contract import WebhookStoreContract


class TestJobStore(JobStoreContract):
    pass


class TestAuditLog(AuditLogContract):
    pass


class TestOpsStore(OpsStoreContract):
    pass


class TestKeyStore(KeyStoreContract):
    pass


class TestReportStore(ReportStoreContract):
    pass


class TestProviderStore(ProviderStoreContract):
    pass


class TestWebhookStore(WebhookStoreContract):
    pass
