"""A no-op queue load for concurrency tests: jobs submitted, then drained by W real processes released
together, each logging the (job, attempt) pairs it claimed (the harness the queue benchmark uses)."""

from docfence.harness.noop_queue import drain_worker, enqueue
from docfence.harness.processes import run_processes

__all__ = ["drain_worker", "enqueue", "run_processes"]
