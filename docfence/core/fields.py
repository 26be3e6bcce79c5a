"""Dynamic fields of mark text (`{recipient}`, `{page}`, ...): their names, the template syntax, the
limits on caller-given values, and the one function that fills a template."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

from docfence.core.errors import ConfigError

#: Given by the caller per job (API form field, CLI option, client argument); stored on the job.
CALLER_FIELDS = ("recipient", "purpose", "reference")
#: Known at submission from the job itself (resolved then and frozen with the policy).
JOB_FIELDS = ("date", "datetime", "job_id", "tenant", "sha8")
#: Known only while rendering one page: a mark using them is drawn per page.
PAGE_FIELDS = ("page", "pages")
FIELD_NAMES = (*CALLER_FIELDS, *JOB_FIELDS, *PAGE_FIELDS)
#: Longest value a caller may give per field (characters, after trimming).
MAX_VALUE_CHARS = {"recipient": 120, "purpose": 120, "reference": 64}

_TOKEN_RE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def fields_in(template: str) -> tuple[str, ...]:
    """The field names `template` uses, in order of first use; raises ConfigError naming an unknown
    field or a stray brace (`{{` and `}}` stand for literal braces)."""
    used: list[str] = []
    for match in _TOKEN_RE.finditer(template):
        token = match.group(0)
        if token in ("{{", "}}"):
            continue
        name = match.group(1)
        if name is None:
            raise ConfigError(f"mark text has a stray {token!r}: write {token * 2!r} for a literal brace")
        if name not in FIELD_NAMES:
            raise ConfigError(f"unknown field {{{name}}} in mark text (known: "
                              f"{', '.join('{' + n + '}' for n in FIELD_NAMES)})", field=name)
        if name not in used:
            used.append(name)
    return tuple(used)


def page_dependent(template: str) -> bool:
    """Whether the text changes from page to page: only `{page}` does (`{pages}` is one number per
    document, filled at render time once the document is open, so such a mark stays shared)."""
    return "page" in fields_in(template)


def fill(template: str, values: Mapping[str, str]) -> str:
    """`template` with each known field replaced by its value (a missing value leaves "" in its place:
    a caller field that was not given prints nothing, so a class mark may name it optionally)."""

    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return str(values.get(match.group(1) or "", ""))

    return _TOKEN_RE.sub(one, template)


def split_runs(template: str, values: Mapping[str, str]) -> tuple[tuple[str, bool], ...]:
    """The filled text as runs (text, page_dependent): the page-independent runs can be drawn once for
    the whole document and only the page-dependent ones per page."""
    runs: list[tuple[str, bool]] = []
    pos = 0
    for match in _TOKEN_RE.finditer(template):
        runs.append((fill(template[pos:match.start()], values), False))
        name = match.group(1)
        runs.append((fill(match.group(0), values), name == "page"))
        pos = match.end()
    runs.append((template[pos:], False))
    merged: list[tuple[str, bool]] = []
    for text, dynamic in runs:
        if not text:
            continue
        if merged and merged[-1][1] == dynamic:
            merged[-1] = (merged[-1][0] + text, dynamic)
        else:
            merged.append((text, dynamic))
    return tuple(merged)


def check_value(name: str, value: object) -> str:
    """A caller-given field value, trimmed; ConfigError (naming the field) when it is not text, too
    long, or holds control characters (which no mark can draw and which could forge log lines)."""
    if name not in CALLER_FIELDS:
        raise ConfigError(f"{name} is not a field a caller may set (allowed: {', '.join(CALLER_FIELDS)})",
                          field=name)
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be text", field=name)
    value = value.strip()
    limit = MAX_VALUE_CHARS[name]
    if len(value) > limit:
        raise ConfigError(f"{name} is {len(value)} characters; at most {limit} are allowed", field=name)
    if any(unicodedata.category(c).startswith("C") for c in value):
        raise ConfigError(f"{name} holds control or unassigned characters", field=name)
    return value


__all__ = ["CALLER_FIELDS", "FIELD_NAMES", "JOB_FIELDS", "MAX_VALUE_CHARS", "PAGE_FIELDS", "check_value",
           "fields_in", "fill", "page_dependent", "split_runs"]
