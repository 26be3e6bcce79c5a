"""Identifiers: sortable random ids (time prefix + sequence + randomness) for jobs and other records."""

from __future__ import annotations

import secrets
import threading

from docfence.core.clock import utcnow

_lock = threading.Lock()
_last = [0, 0]  # last millisecond used, sequence within it


def new_id(prefix: str = "job") -> str:
    """`job_` + 12 hex chars of milliseconds + 4 of sequence + 12 random: unique, and increasing
    within a process even when many ids share a millisecond (claims order ties by id)."""
    ms = int(utcnow().timestamp() * 1000)
    with _lock:
        if ms <= _last[0]:
            ms, seq = _last[0], _last[1] + 1
        else:
            seq = 0
        _last[:] = [ms, seq]
    return f"{prefix}_{ms:012x}{seq & 0xFFFF:04x}{secrets.token_hex(6)}"
