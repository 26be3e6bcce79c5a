"""The render child: runs the engine on one job's input under resource limits, in its own process.

PDFium is not thread-safe and a hostile file may eat memory or loop; a child that is killed or
overruns cannot commit anything, because only the parent holds the lease.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CTX: Any = None


def context() -> Any:
    """A forkserver context with the engines preloaded: children start fast and single-threaded."""
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["docfence.engines", "docfence.worker.child"])
    return _CTX


@dataclass(frozen=True)
class RenderOutcome:
    ok: bool
    pages: int = 0
    validation: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None
    retryable: bool = False


def render_child(input_path: str, output_path: str, policy_json: str, memory_mb: int, cpu_s: int) -> None:
    """Child entry point: apply limits, render, write output + a JSON outcome file, exit."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 1024 * 1024,) * 2)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    outcome = _render(input_path, output_path, policy_json)
    tmp = output_path + ".outcome.tmp"
    Path(tmp).write_text(json.dumps(outcome.__dict__), "utf-8")
    os.replace(tmp, output_path + ".outcome")


def _render(input_path: str, output_path: str, policy_json: str) -> RenderOutcome:
    from docfence.core.errors import DocfenceError, RenderResourceExceeded
    from docfence.core.policy import JobPolicy
    from docfence.worker.faults import fault_point

    try:
        fault_point("render")
        from docfence.core.policy import Kind

        policy = JobPolicy.from_dict(json.loads(policy_json))
        data = Path(input_path).read_bytes()
        if policy.kind is Kind.REPORT:  # the input is a frozen template version + its data (JSON)
            from docfence.engines.report_job import render_report_job

            result = render_report_job(data, policy)
        else:
            from docfence import engines

            result = engines.process(data, policy)
        with open(output_path, "wb") as fh:
            fh.write(result.output)
            fh.flush()
            os.fsync(fh.fileno())
        return RenderOutcome(True, pages=result.pages, validation=result.validation)
    except MemoryError:
        err = RenderResourceExceeded("rendering exceeded its memory limit")
        return RenderOutcome(False, error_code=err.code, error_message=err.message)
    except DocfenceError as exc:
        return RenderOutcome(False, error_code=exc.code, error_message=exc.message, retryable=exc.retryable,
                             validation=getattr(exc, "report", None))
    except Exception as exc:  # an engine bug must fail the attempt, not hang it
        return RenderOutcome(False, error_code="render_error",
                             error_message=f"the renderer failed ({type(exc).__name__})", retryable=True)


def read_outcome(output_path: str) -> RenderOutcome | None:
    path = Path(output_path + ".outcome")
    if not path.exists():
        return None
    return RenderOutcome(**json.loads(path.read_text("utf-8")))
