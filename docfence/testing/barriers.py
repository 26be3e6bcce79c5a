"""The test side of the `wait:NAME` fault action: see which processes reached a fault point and
release the ones blocked at a barrier, so fault tests order events instead of guessing durations."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from docfence.testing.procs import wait_for

HANG_GUARD_S = 120.0  # only stops a broken build from hanging; never what a test asserts


@dataclass(frozen=True)
class Barriers:
    folder: Path  # the DOCFENCE_FAULTS_DIR of the processes under test

    def arrivals(self, point: str) -> list[int]:
        """Pids that reached `point`, in order of arrival (one per arrival)."""
        path = self.folder / f"reached-{point}"
        if not path.exists():
            return []
        return [int(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_reached(self, point: str, count: int = 1) -> None:
        """Block until `point` was reached `count` times."""
        wait_for(lambda: len(self.arrivals(point)) >= count, HANG_GUARD_S, f"fault point {point}")

    def release(self, name: str) -> None:
        """Let every process blocked (now or later) at `wait:name` go on."""
        (self.folder / f"release-{name}").touch()
