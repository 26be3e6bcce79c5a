"""Structured JSON logs: one object per line with the job id and attempt when known. A redacting
filter is the last line of defence: API keys, bearer tokens and signed-URL tokens never leave."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime

from docfence.core.loops import safe_traceback

# Context fields a record may carry (passed as `extra=`); anything else in `extra` is dropped.
CONTEXT_FIELDS = ("job_id", "attempt", "worker", "request_id", "region", "provider_job_id", "outcome",
                  "error_id")
_SECRETS = [
    (re.compile(r"dfk_[A-Za-z0-9_-]+"), "dfk_[redacted]"),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1[redacted]"),
    (re.compile(r"/v1/signed/[A-Za-z0-9._~+/=-]+"), "/v1/signed/[redacted]"),
    (re.compile(r"(?i)([?&](?:x-amz-signature|x-amz-credential|signature|token|sig)=)[^&\s\"']+"),
     r"\1[redacted]"),
]


def redact(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = ()
        return True


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


def configure(level: str = "INFO", *, json_lines: bool = True) -> None:
    """Route every logger through one redacting handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(
        "%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("uvicorn.access",):  # access lines carry paths, and signed URLs are paths
        logging.getLogger(noisy).disabled = True
