"""The validation report's records: a named check (its failures, at most MAX_DETAILS kept, and how and
where it ran) and pages written as 1-based ranges."""

from __future__ import annotations

from typing import Any

Check = dict[str, Any]
MAX_DETAILS = 10


def check(name: str, failures: list[str], **details: Any) -> Check:
    return {"name": name, "ok": not failures, "failures": failures[:MAX_DETAILS], **details}


def page_ranges(indices: list[int] | range) -> str:
    """0-based page indices as 1-based ranges: [0, 1, 2, 6] -> "1-3,7"."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(set(indices)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(f"{run[0] + 1}-{run[-1] + 1}" if len(run) > 1 else f"{run[0] + 1}")
        run = [i]
    if run:
        parts.append(f"{run[0] + 1}-{run[-1] + 1}" if len(run) > 1 else f"{run[0] + 1}")
    return ",".join(parts)


__all__ = ["MAX_DETAILS", "Check", "check", "page_ranges"]
