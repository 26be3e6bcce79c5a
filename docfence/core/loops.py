"""The one shape of every long-running loop (River's services): a bounded `run_once()` pass, and
`run_forever()`, the supervisor that calls it until `stop` is set and survives any exception with one
log line and a counter. Also `safe_traceback()`: how an exception nobody expected is logged (frames and
exception types, never messages, which may quote a document or a URL)."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import TypeVar

from docfence.core.errors import DocfenceError

log = logging.getLogger("docfence.loops")
R = TypeVar("R")
_MAX_CHAIN = 5  # causes and contexts followed from the raised exception
_CAUSE = "The above exception was the direct cause of the following exception:"
_CONTEXT = "During handling of the above exception, another exception occurred:"


def run_forever(
    name: str, run_once: Callable[[], R], *, interval_s: float, stop: threading.Event,
    record_error: Callable[[str], None], busy: Callable[[R], bool] | None = None,
    max_backoff_s: float | None = None, logger: logging.Logger | None = None,
) -> None:
    """Call `run_once()` until `stop` is set, waiting `interval_s` (or until `stop`) after each pass,
    except a pass for which `busy(result)` is true (more work is waiting: the next pass starts at once).

    A pass that raises never ends the loop: a DocfenceError is one WARNING line with its code, any other
    Exception one ERROR line with `safe_traceback()`; both call `record_error(name)` (the loop's counter:
    core imports nothing installed, so the caller passes `metrics.record_loop_error`). After `n` failed
    passes in a row the wait is `interval_s * 2**(n-1)`, at most `max_backoff_s` (None: no back-off). A
    BaseException that is not an Exception (KeyboardInterrupt, SystemExit) still ends the loop."""
    if interval_s <= 0:
        raise ValueError(f"{name}: interval_s must be positive")
    out = logger or log
    failures = 0
    while not stop.is_set():
        try:
            result = run_once()
        except Exception as exc:  # the loop outlives any one pass, whatever it raised
            failures += 1
            report_failure(f"{name} pass", exc, out)
            record_error(name)
            stop.wait(backoff(interval_s, failures, max_backoff_s))
            continue
        failures = 0
        if busy is None or not busy(result):
            stop.wait(interval_s)


def report_failure(what: str, exc: Exception, logger: logging.Logger) -> None:
    """The one log line of a failed pass (or of one item a pass goes on after): "<what> failed: <code>"
    at WARNING for an error docfence knows, else "<what> failed: unexpected <Type>" at ERROR followed by
    `safe_traceback(exc)`."""
    if isinstance(exc, DocfenceError):
        logger.warning("%s failed: %s", what, exc.code)
    else:
        logger.error("%s failed: unexpected %s\n%s", what, type(exc).__name__, safe_traceback(exc))


def backoff(interval_s: float, failures: int, max_backoff_s: float | None) -> float:
    """The wait after `failures` failed passes in a row (1: `interval_s`, doubling up to the cap)."""
    if max_backoff_s is None or failures <= 1:
        return interval_s
    return max(interval_s, min(max_backoff_s, interval_s * 2.0 ** min(failures - 1, 30)))


def safe_traceback(exc: BaseException) -> str:
    """The traceback of `exc` and of its causes and contexts: every frame (file, line, function, source
    line) and each exception's qualified type, but no exception message (messages may quote input)."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    link = ""
    while current is not None and id(current) not in seen and len(chain) < _MAX_CHAIN:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT
        else:
            current = None
    parts: list[str] = []
    for error, how in reversed(chain):  # oldest first, as Python prints it
        kind = type(error)
        frames = "".join(traceback.format_list(traceback.extract_tb(error.__traceback__)))
        parts.append(f"Traceback (most recent call last):\n{frames}{kind.__module__}.{kind.__qualname__}")
        if how:
            parts.append(f"\n{how}\n")
    return "\n".join(parts)
