"""Run `process` in a separate Python process with a time and memory limit (the CLI and bench use it):
a hostile file fails its own run, never the caller. Framing: one JSON header line, then raw bytes."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from docfence.core.errors import DocfenceError, RenderResourceExceeded
from docfence.core.policy import JobPolicy

_CHILD = "from docfence.engines.isolated import child_main; child_main()"


@dataclass(frozen=True)
class IsolatedResult:
    ok: bool
    code: str
    message: str
    output: bytes = b""
    pages: int = 0
    validation: dict[str, Any] | None = None


def run_isolated(data: bytes, policy: JobPolicy, password: str | None = None) -> IsolatedResult:
    """Process `data` in a child; overrunning limits.render_timeout_s kills it (render_resource_exceeded)."""
    header = json.dumps({"policy": policy.to_dict(), "password": password}).encode("utf-8")
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=header + b"\n" + data,
            capture_output=True,
            timeout=policy.limits.render_timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        error = RenderResourceExceeded("Processing exceeded its time limit.")
        return IsolatedResult(False, error.code, error.message)
    head, _, body = done.stdout.partition(b"\n")
    if done.returncode != 0 or not head:
        error = RenderResourceExceeded("The processing child ended without an answer.")
        return IsolatedResult(False, error.code, error.message)
    answer = json.loads(head)
    return IsolatedResult(
        answer["ok"],
        answer["code"],
        answer["message"],
        body,
        answer.get("pages", 0),
        answer.get("validation"),
    )


def _limit_memory(megabytes: int) -> None:
    limit = megabytes * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def child_main() -> None:
    """Child side: read the request from stdin, answer on stdout."""
    from docfence.engines import process

    raw = sys.stdin.buffer.read()
    head, _, data = raw.partition(b"\n")
    request = json.loads(head)
    policy = JobPolicy.from_dict(request["policy"])
    _limit_memory(policy.limits.render_memory_mb + 512)  # + the interpreter and libraries themselves
    out = sys.stdout.buffer
    try:
        result = process(data, policy, password=request["password"])
    except MemoryError:
        error = RenderResourceExceeded("Processing exceeded its memory limit.")
        out.write(json.dumps({"ok": False, "code": error.code, "message": error.message}).encode() + b"\n")
        return
    except DocfenceError as exc:
        answer = {
            "ok": False,
            "code": exc.code,
            "message": exc.message,
            "validation": getattr(exc, "report", None),
        }
        out.write(json.dumps(answer).encode() + b"\n")
        return
    answer = {"ok": True, "code": "ok", "message": "", "pages": result.pages, "validation": result.validation}
    out.write(json.dumps(answer).encode() + b"\n")
    out.write(result.output)
