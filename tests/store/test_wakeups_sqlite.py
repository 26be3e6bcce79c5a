"""SQLite's wake-up sockets between real processes: a dead process's socket is removed by the next
commit, and a process that could not keep up (its queue overflowed) wakes all its waiters rather
than miss an announcement silently."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from docfence.core.policy import JobPolicy
from docfence.core.records import NewJob
from docfence.store.wakeups_sqlite import _queue_capacity, socket_dir
from docfence.testing.stores import sqlite_store
from docfence.testing.wakeup_probe import Probe


def test_the_next_commit_removes_the_socket_of_a_killed_process(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path / "db.sqlite")
    try:
        folder = socket_dir((tmp_path / "db.sqlite").resolve())
        with Probe(f"sqlite:///{tmp_path / 'db.sqlite'}") as probe:
            assert len(list(folder.iterdir())) == 1  # the probe's (this process never waited)
            probe.proc.send_signal(signal.SIGKILL)
            probe.proc.wait()
            assert len(list(folder.iterdir())) == 1  # a killed process cleans nothing up
            store.submit(NewJob(tenant="t1", policy=JobPolicy()))
            assert list(folder.iterdir()) == []
    finally:
        store.close()


def test_a_receiver_whose_queue_overflowed_wakes_every_waiter(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path / "db.sqlite")
    try:
        watched, _ = store.submit(NewJob(tenant="t1", policy=JobPolicy()))
        with Probe(f"sqlite:///{tmp_path / 'db.sqlite'}", [watched.id]) as probe:
            os.kill(probe.proc.pid, signal.SIGSTOP)  # it cannot read: its socket's queue fills up
            for _ in range(_queue_capacity() + 2):  # the last ones find the queue full and are dropped
                store.submit(NewJob(tenant="t1", policy=JobPolicy()))
            os.kill(probe.proc.pid, signal.SIGCONT)
            # Whatever was dropped might have been the watched job's end: its watch wakes to re-read.
            gen = probe.ready_gen + 1
            assert sorted([probe.line(), probe.line()]) == [f"end - {gen}", f"work {gen}"]
    finally:
        store.close()
