"""Structured JSON logs: one object per line with the job id and attempt when known. A redacting
filter is the last line of defence: API keys, bearer tokens, signed-URL tokens and the path and query
of every absolute URL (a webhook endpoint's secrets live there) never leave; libraries log only from
WARNING up unless asked (their INFO lines name whole request URLs)."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

from docfence.core.loops import safe_traceback

# Context fields a record may carry (passed as `extra=`); anything else in `extra` is dropped.
CONTEXT_FIELDS = ("job_id", "attempt", "worker", "request_id", "region", "provider_job_id", "outcome",
                  "error_id")
#: The level below which a record of a logger outside `docfence` is dropped (configure's library_level).
LIBRARY_LEVEL = "WARNING"
# scheme://[userinfo@]host[:port] then the rest of the URL: only the scheme and the host survive
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)(?:[^\s/?#@\"'<>]*@)?([^\s/?#@\"'<>]+)([/?#][^\s\"'<>]*)?")
_SECRETS = [
    (re.compile(r"dfk_[A-Za-z0-9_-]+"), "dfk_[redacted]"),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1[redacted]"),
    (re.compile(r"/v1/signed/[A-Za-z0-9._~+/=-]+"), "/v1/signed/[redacted]"),
    (re.compile(r"(?i)([?&](?:x-amz-signature|x-amz-credential|signature|token|sig)=)[^&\s\"']+"),
     r"\1[redacted]"),
]


def _origin(match: re.Match[str]) -> str:
    """A URL as its scheme://host[:port]; a path beyond "/", a query or a fragment becomes /[redacted]
    (a trailing sentence full stop or comma stays outside)."""
    rest = match.group(3) or ""
    tail = rest[len(rest.rstrip(".,;:)")):]
    rest = rest[: len(rest) - len(tail)]
    kept = match.group(1) + match.group(2)
    return kept + ("/[redacted]" if rest not in ("", "/") else rest) + tail


def redact(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return _URL.sub(_origin, text)


def _is_ours(record: logging.LogRecord) -> bool:
    return record.name == "docfence" or record.name.startswith("docfence.")


def _redacted_arg(value: object, *, ours: bool) -> object:
    """One format argument, redacted as a value: a URL (a str, or an object such as httpx.URL whose
    text is one) keeps its origin; a library's path argument ("/..." as urllib3 passes it beside the
    host) is dropped whole. Numbers and None pass as they are, so "%d" still formats them."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = str(value)
    if not ours and text.startswith("/") and len(text) > 1:
        return "/[redacted]"
    clean = redact(text)
    return value if clean == text else clean


class RedactingFilter(logging.Filter):
    """On every handler docfence installs: each argument is redacted as a value, then the message as
    text; the record leaves with its message formatted and no arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        ours = _is_ours(record)
        args = record.args
        if isinstance(args, Mapping):
            record.args = {k: _redacted_arg(v, ours=ours) for k, v in args.items()}
        elif args:
            record.args = tuple(_redacted_arg(v, ours=ours) for v in args)
        record.msg = redact(record.getMessage())
        record.args = ()
        return True


class LibraryLevelFilter(logging.Filter):
    """Drops the records of loggers outside `docfence` below `level`: httpx, httpcore, urllib3,
    botocore and uvicorn name whole request URLs at INFO and DEBUG. Structural, by logger name, so a
    library docfence does not know of yet is covered too."""

    def __init__(self, level: str | int = LIBRARY_LEVEL) -> None:
        super().__init__()
        self.level = logging.getLevelName(level) if isinstance(level, str) else level
        if not isinstance(self.level, int):
            raise ValueError(f"unknown log level {level!r}")

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level or _is_ours(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info and record.exc_info[0] is not None:
            out["error"] = record.exc_info[0].__name__  # the type only: messages may quote input
            if record.exc_info[1] is not None:  # where it happened: frames and types, never messages
                out["traceback"] = safe_traceback(record.exc_info[1])
        return json.dumps(out, ensure_ascii=False)


def configure(level: str = "INFO", *, json_lines: bool = True, library_level: str = LIBRARY_LEVEL) -> None:
    """Route every logger through one handler on stderr that drops libraries' records below
    `library_level` and redacts what it keeps."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(LibraryLevelFilter(library_level))  # first: a dropped record is never formatted
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(
        "%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("uvicorn.access",):  # access lines carry paths, and signed URLs are paths
        logging.getLogger(noisy).disabled = True
