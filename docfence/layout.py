"""Where a job's bytes live in its region's object store. Every key of a job sits under its prefix,
so deleting a job's bytes is one prefix deletion, and staging keys are specific to one attempt."""

from __future__ import annotations


def job_prefix(tenant: str, job_id: str) -> str:
    return f"jobs/{tenant}/{job_id}/"


def input_key(tenant: str, job_id: str) -> str:
    return f"{job_prefix(tenant, job_id)}input.pdf"


def staging_key(tenant: str, job_id: str, attempt: int) -> str:
    """Only attempt `attempt` ever writes here; nothing under staging/ is served."""
    return f"{job_prefix(tenant, job_id)}staging/{attempt}/output.pdf"


def artifact_key(tenant: str, job_id: str, attempt: int) -> str:
    """The published key, named after the attempt whose fenced commit made it visible."""
    return f"{job_prefix(tenant, job_id)}artifact/{attempt}.pdf"


def staging_prefix(tenant: str, job_id: str) -> str:
    return f"{job_prefix(tenant, job_id)}staging/"
