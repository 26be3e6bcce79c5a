"""Real worker processes for fault tests (the helpers live with the benchmarks, which use them too)."""

from docfence.benchmarks.harness import REPO, start_worker, stop, wait_for, worker_env

__all__ = ["REPO", "start_worker", "stop", "wait_for", "worker_env"]
