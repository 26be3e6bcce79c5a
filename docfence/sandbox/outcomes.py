"""The one mapping from what happened to a sandboxed job to its coded outcome.

| what happened                                   | code                       | retried |
|-------------------------------------------------|----------------------------|---------|
| the child answered with a result                | (ok)                       |         |
| a coded document error (DocfenceError)          | its own code               | its own |
| MemoryError (RLIMIT_AS)                         | render_resource_exceeded   | no      |
| a write past RLIMIT_FSIZE (EFBIG)               | render_resource_exceeded   | no      |
| killed for its wall-clock budget, or SIGXCPU    | render_resource_exceeded   | no      |
| any other unexpected exception (engine or ours) | engine_error + error id    | no      |
| died without an answer (signal, crash, OOM kill)| render_crashed             | yes     |
| the zygote could not fork it (EAGAIN, ENOMEM)   | render_crashed             | yes     |
| canceled by its parent (lease lost, shutdown)   | (canceled: nothing to record)         |

An answer read after the parent decided to kill the process (wall clock, cancel) is never a success:
the kill's own outcome stands (supervisor._Watch). An unexpected exception's traceback travels in
`Outcome.trace` for the parent's log, under the error id its public message names; the message itself
never holds it.
"""

from __future__ import annotations

import errno
import os
import signal
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from docfence.core.errors import DocfenceError, EngineError, RenderCrashed, RenderResourceExceeded
from docfence.core.ids import new_id

TRACE_MAX_CHARS = 16_000  # the end of a longer traceback (its last frames and the exception) is kept


@dataclass(frozen=True)
class Outcome:
    ok: bool
    pages: int = 0
    validation: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None
    retryable: bool = False
    canceled: bool = False  # the parent stopped it (lease lost, shutdown): record nothing
    engine_s: float = 0.0  # time the child spent in the engine itself (not fork, not I/O)
    process: dict[str, Any] = field(default_factory=dict)  # {"pid", "token"} of the render process
    error_id: str | None = None  # an unexpected exception's: named in error_message and in the log line
    trace: str | None = field(default=None, repr=False)  # its traceback: for the log, never a message

    def error(self) -> DocfenceError:
        """This failure as an exception carrying its code and retryability."""
        return coded_error(self.error_code or EngineError.code, self.error_message, self.retryable)

    def to_message(self) -> dict[str, Any]:
        return asdict(self)


class _CodedError(DocfenceError):
    """A coded failure carried over from the render process."""


def coded_error(code: str, message: str | None, retryable: bool) -> DocfenceError:
    err = _CodedError(message or code)
    err.code = code  # type: ignore[misc]  # the child's stable code, carried over
    err.retryable = retryable  # type: ignore[misc]
    return err


def from_exception(exc: BaseException) -> Outcome:
    """Child side: an exception raised by the work, as an outcome."""
    if isinstance(exc, MemoryError):
        err: DocfenceError = RenderResourceExceeded("rendering exceeded its memory limit")
        return Outcome(False, error_code=err.code, error_message=err.message)
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:  # inherit.file_size_limit, SIGXFSZ ignored
        err = RenderResourceExceeded("rendering exceeded its file-size limit")
        return Outcome(False, error_code=err.code, error_message=err.message)
    if isinstance(exc, DocfenceError):
        return Outcome(False, error_code=exc.code, error_message=exc.message, retryable=exc.retryable,
                       validation=getattr(exc, "report", None))
    error_id = new_id("err")
    err = EngineError(f"the engine failed unexpectedly on this document (error id {error_id})")
    trace = "".join(traceback.format_exception(exc))[-TRACE_MAX_CHARS:]
    return Outcome(False, error_code=err.code, error_message=err.message, retryable=err.retryable,
                   error_id=error_id, trace=trace)


def from_answer(answer: dict[str, Any]) -> Outcome:
    """Parent side: the child's own answer."""
    known = Outcome.__dataclass_fields__
    return Outcome(**{k: v for k, v in answer.items() if k in known})


def from_exit(status: int | None, *, killed_for: str | None) -> Outcome:
    """Parent side: the child ended without an answer. `status` is its wait status (None: unknown,
    e.g. the zygote died with it); `killed_for` is "wall_clock" or "canceled" when we killed it."""
    if killed_for == "canceled":
        return Outcome(False, canceled=True, error_code="canceled", error_message="canceled by the parent")
    if killed_for == "wall_clock":
        err: DocfenceError = RenderResourceExceeded("rendering exceeded its time budget")
        return Outcome(False, error_code=err.code, error_message=err.message)
    if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        err = RenderResourceExceeded("rendering exceeded its CPU-time limit")
        return Outcome(False, error_code=err.code, error_message=err.message)
    err = RenderCrashed(f"the render process died without an answer ({describe(status)})")
    return Outcome(False, error_code=err.code, error_message=err.message, retryable=err.retryable)


def from_fork_failure(number: int) -> Outcome:
    """Parent side: the zygote could not fork the task's render process (a process or memory limit of
    the machine just now, not the document's doing): retryable."""
    name = errno.errorcode.get(number, str(number))
    err = RenderCrashed(f"no render process could be started (fork failed: {name})")
    return Outcome(False, error_code=err.code, error_message=err.message, retryable=err.retryable)


def describe(status: int | None) -> str:
    if status is None:
        return "its zygote died"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"signal {signal.Signals(number).name}"
        except ValueError:
            return f"signal {number}"
    return f"exit {os.waitstatus_to_exitcode(status)}"
