"""The job keys of a Service (docfence.blobs.kek.jobs.JobKeys from [encryption]), shared by submission and
downloads; and the RowKey of a job. A test sets `service.job_keys` to inject one."""

from __future__ import annotations

from docfence.blobs.kek.jobs import JobKeys, RowKey
from docfence.core.records import Job
from docfence.service.base import ServiceState


def job_keys(state: ServiceState) -> JobKeys:
    """`state.job_keys` (made with the service from its [encryption] settings)."""
    return state.job_keys


def row_key(job: Job) -> RowKey:
    """The key fields of a job's row."""
    return RowKey(job.tenant, job.id, job.data_key_provider, job.data_key_kek_id, job.data_key_wrapped)
