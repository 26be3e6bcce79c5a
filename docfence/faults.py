"""The one test hook for fault injection. Inert unless DOCFENCE_FAULTS is set (tests set it).

DOCFENCE_FAULTS="point=action[,point=action...]" with points:
  after_claim, after_staging_upload, before_commit, heartbeat, storage_write, render,
  confine (a render process, as it confines itself; `fail` there is a confinement the kernel refused),
  sign (in the signing process, before it signs), webhook_sent (a webhook request was answered; its
  outcome is not recorded yet), after_input_upload (a submission's input and sealed password are
  stored; its job row is not committed yet)
and actions:
  kill        SIGKILL this process at that point (a real crash)
  sleep:S     stall for S seconds (e.g. to let the lease expire while the worker keeps running)
  drop_db     close the store's database connection (the next statement must reconnect)
  fail        raise the error a real failure at that point would raise
  once:ACTION do ACTION only the first time in this process tree (marker file in DOCFENCE_FAULTS_DIR)
  wait:NAME   a barrier: say "reached" (file `reached-POINT` in DOCFENCE_FAULTS_DIR, one line per
              arrival) and block until the test creates `release-NAME` there. Tests order events with
              it instead of guessing durations; WAIT_GUARD_S only keeps a forgotten barrier from
              leaving a process behind forever.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docfence.core.clock import monotonic

WAIT_GUARD_S = 600.0
POINTS = ("after_claim", "after_staging_upload", "before_commit", "heartbeat", "storage_write", "render",
          "confine",
          "sign", "webhook_sent", "after_input_upload")


class InjectedFault(Exception):
    """Raised by a `fail` action."""


def _parse(spec: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        point, _, action = item.partition("=")
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}")
        out[point] = action
    return out


def fault_point(point: str, *, store: Any = None, error: Callable[[], Exception] | None = None) -> None:
    """Run the configured action for `point`, if any. `error` builds what a real failure raises."""
    spec = os.environ.get("DOCFENCE_FAULTS")
    if not spec:
        return
    action = _parse(spec).get(point)
    if not action:
        return
    if action.startswith("once:"):
        marker = _faults_dir() / f"docfence-fault-{point}"
        try:
            marker.touch(exist_ok=False)
        except FileExistsError:
            return
        action = action.removeprefix("once:")
    _act(action, store, error, point)


def _faults_dir() -> Path:
    return Path(os.environ.get("DOCFENCE_FAULTS_DIR", "/tmp"))


def _act(action: str, store: Any, error: Callable[[], Exception] | None, point: str) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))  # a real stall, not the clock: the test wants it
    elif action.startswith("wait:"):
        _barrier(point, action.split(":", 1)[1])
    elif action == "drop_db" and store is not None:
        store.drop_connection()
    elif action == "fail":
        raise error() if error is not None else InjectedFault("injected fault")


def _barrier(point: str, name: str) -> None:
    folder = _faults_dir()
    with (folder / f"reached-{point}").open("a") as fh:  # O_APPEND: one whole line per arrival
        fh.write(f"{os.getpid()}\n")
    release = folder / f"release-{name}"
    until = monotonic() + WAIT_GUARD_S
    while not release.exists() and monotonic() < until:
        time.sleep(0.01)  # polls a file the test creates; no duration is being guessed here
