"""Where a job's bytes live in its region's object store. Every key of a job sits under its prefix,
so deleting a job's bytes is one prefix deletion, and staging keys are specific to one attempt."""

from __future__ import annotations


def job_prefix(tenant: str, job_id: str) -> str:
    return f"jobs/{tenant}/{job_id}/"


def input_key(tenant: str, job_id: str) -> str:
    return f"{job_prefix(tenant, job_id)}input.pdf"


def staging_key(tenant: str, job_id: str, attempt: int) -> str:
    """Only attempt `attempt` ever writes here; only the attempt whose fenced commit names it is served."""
    return f"{job_prefix(tenant, job_id)}attempts/{attempt}/output.pdf"


def artifact_key(tenant: str, job_id: str, attempt: int) -> str:
    """The published key is the winning attempt's staging object: no copy happens after the commit,
    so a crash between commit and publication cannot lose it. Other attempts' objects are orphans."""
    return staging_key(tenant, job_id, attempt)


def attempt_of_staging_key(key: str) -> int | None:
    """The attempt number in a staging key, or None when the key is not a staging object."""
    parts = key.split("/")
    if len(parts) == 6 and parts[3] == "attempts" and parts[4].isdigit():
        return int(parts[4])
    return None
