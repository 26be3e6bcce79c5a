"""A waiting process for the wake-up tests (`python -m docfence.testing.wakeup_probe DB_URL [JOB_ID...]`)
and `Probe`, the tests' handle on one.

The process waits the way the worker and the API do, with safety polls of an hour, and prints one
line per wake-up, so a test in another process sees exactly what reached it:

    ready <gen>           listening; <gen> is the work generation heard so far
    work <gen>            woken by a work announcement (or a possible miss)
    end <ids|-> <gen>     a watch on JOB_IDs woke: the ids announced ended, or "-" for a possible miss
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Sequence

from docfence.core.interpreter import module_command
from docfence.store import open_store
from docfence.store.wakeups import JobEndWatch, Listener

AN_HOUR = 3600.0
HANG_GUARD_S = 60.0  # how long Probe.line() waits: only a broken build ever waits this long


class Probe:
    """A running probe process; `line()` is its next report. Use it as a context manager."""

    def __init__(self, url: str, job_ids: Sequence[str] = ()) -> None:
        self.proc = subprocess.Popen(module_command("docfence.testing.wakeup_probe", url, *job_ids),
                                     stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        kind, gen = self.line().split()
        assert kind == "ready", kind
        self.ready_gen = int(gen)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def line(self) -> str:
        try:
            return self.lines.get(timeout=HANG_GUARD_S)
        except queue.Empty:
            raise AssertionError("the waiting process reported nothing") from None

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> None:
    store = open_store(argv[0], migrate=False)
    store.wait_for_work(AN_HOUR)  # the first call returns once the listener listens
    listener = store.wakeup_listener()
    watch = store.watch_job_end(argv[1:])
    threading.Thread(target=_report_ends, args=(watch, listener), daemon=True).start()
    _say(f"ready {listener.fanout.work_generation()}")
    while True:
        if store.wait_for_work(AN_HOUR):
            _say(f"work {listener.fanout.work_generation()}")


def _report_ends(watch: JobEndWatch, listener: Listener) -> None:
    while True:
        if watch.wait(AN_HOUR):
            ids = ",".join(sorted(watch.take_announced())) or "-"
            _say(f"end {ids} {listener.fanout.work_generation()}")


_print_lock = threading.Lock()


def _say(line: str) -> None:
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
