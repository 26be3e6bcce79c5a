"""Identifiers: sortable random ids (time prefix + randomness) for jobs and other records."""

from __future__ import annotations

import secrets

from docfence.core.clock import utcnow


def new_id(prefix: str = "job") -> str:
    """`job_` + 12 hex chars of milliseconds + 16 random hex chars: unique and roughly time-ordered."""
    ms = int(utcnow().timestamp() * 1000)
    return f"{prefix}_{ms:012x}{secrets.token_hex(8)}"
