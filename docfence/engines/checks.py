"""The validation report's records: a named check (its failures, at most MAX_DETAILS kept, and how and
where it ran), pages written as 1-based ranges, and what a failed check says differed ("details": page
numbers, PDF names, numbers, object numbers, capped tool messages; never document text).

A failed check carries "details": at most MAX_DETAILS strings of at most MAX_DETAIL_CHARS, page by page
what differed ("page 3: /Annots 12 → 11"), lines that differ only by page merged ("pages 4,7: ...").
They are computed only when a check fails, so a passing job pays nothing for them.
"""

from __future__ import annotations

import re
from typing import Any

Check = dict[str, Any]
MAX_DETAILS = 10
MAX_DETAIL_CHARS = 200
MESSAGE_CHARS = 480  # the job's last_error message (the store keeps 500)
_PAGE_LINE = re.compile(r"pages? ([\d,-]+): (.+)", re.S)
_UNPRINTABLE = re.compile(r"[^\x20-\x7e\u00a0-\u2bff]")
_TOOL_CHARS = 160
# a reader's message may quote what it could not parse: quoted runs are dropped, and so is the name
# of the in-memory file libqpdf was given
_QUOTED = re.compile(r"\"[^\"]*\"|(?<![A-Za-z])'[^']*'")
_IN_MEMORY = re.compile(r"(?:stream )?<_io\.\w+ object at 0x[0-9a-f]+>:?\s*")


def check(name: str, failures: list[str], details: list[str] | None = None, **about: Any) -> Check:
    """A named check; failed, it carries `details` (default: its failures, page lines merged)."""
    found: Check = {"name": name, "ok": not failures, "failures": failures[:MAX_DETAILS], **about}
    if failures:
        found["details"] = bounded(merge_pages(details or failures))
    return found


def bounded(texts: list[str]) -> list[str]:
    """At most MAX_DETAILS lines, each printable and at most MAX_DETAIL_CHARS long."""
    return [clip(t, MAX_DETAIL_CHARS) for t in texts[:MAX_DETAILS]]


def clip(text: str, limit: int) -> str:
    text = " ".join(_UNPRINTABLE.sub("?", str(text)).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def tool_message(text: str, path: str | None = None) -> str:
    """A reader's (pdfinfo's, libqpdf's) message as a detail: its first error line (else its first
    line), the file's path as "the output", quoted runs as "…", capped at _TOOL_CHARS. These readers
    describe structure (offsets, object numbers, what they expected); the cap and the quote removal keep
    anything else they might echo out of the report."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    line = (errors or lines or ["no message"])[0]
    if path:
        line = line.replace(path, "the output")
    return clip(_QUOTED.sub("…", _IN_MEMORY.sub("", line)), _TOOL_CHARS)


def merge_pages(lines: list[str]) -> list[str]:
    """"page 4: X" and "pages 7-8: X" as "pages 4,7-8: X", in first-seen order; other lines kept."""
    pages: dict[str, list[int]] = {}
    order: list[str] = []
    for line in lines:
        m = _PAGE_LINE.fullmatch(line)
        key = m.group(2) if m else "\0" + line
        if key not in pages:
            pages[key] = []
            order.append(key)
        if m:
            pages[key].extend(_indices(m.group(1)))
    merged = []
    for key in order:
        if key.startswith("\0"):
            merged.append(key[1:])
        else:
            many = len(pages[key]) > 1
            merged.append(f"page{'s' if many else ''} {page_ranges(pages[key])}: {key}")
    return merged


def _indices(ranges: str) -> list[int]:
    """"1-3,7" -> [0, 1, 2, 6] (page_ranges read back)."""
    found: list[int] = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            found.extend(range(int(first) - 1, int(last or first)))
    return found


def explain(report: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(name, details) of each failed check; a check made without check() gets its failures as details
    (it is given them in place, so the report the job keeps says the same)."""
    failed = []
    for item in report.get("checks", []):
        if not isinstance(item, dict) or item.get("ok"):
            continue
        if not item.get("details"):
            item["details"] = bounded(merge_pages([str(f) for f in item.get("failures") or []]))
        failed.append((str(item.get("name")), list(item["details"])))
    return failed


def failure_message(report: dict[str, Any]) -> str:
    """The job's safe message: every failed check by name, then the first detail of each that fits
    (at most MESSAGE_CHARS), e.g. "... validation (page_dictionary): page 3: /Annots 12 → 11"."""
    failed = explain(report)
    head = f"The output failed its fidelity validation ({', '.join(n for n, _ in failed) or 'unknown'})"
    parts: list[str] = []
    for name, details in failed:
        if details:
            part = details[0] if len(failed) == 1 else f"{name}: {details[0]}"
            if len(head) + sum(len(p) + 2 for p in parts) + len(part) + 3 > MESSAGE_CHARS:
                break
            parts.append(part)
    return clip(head + (": " + "; ".join(parts) if parts else "") + ".", MESSAGE_CHARS)


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


__all__ = [
    "MAX_DETAILS", "MAX_DETAIL_CHARS", "Check", "bounded", "check", "clip", "explain", "failure_message",
    "merge_pages", "page_ranges", "tool_message",
]
