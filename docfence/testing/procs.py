"""Real worker processes for fault tests: the harness's (which the benchmarks use too), and a render budget
long enough that load cannot fail a job whose subject is not the budget."""

from pathlib import Path

from docfence.core.policy import Limits
from docfence.harness.workers import REPO, start_worker, stop, wait_for, worker_env

__all__ = ["LONG_BUDGET_LIMITS", "REPO", "long_budget_config", "start_worker", "stop", "wait_for",
           "worker_env"]

# A render budget a starved machine cannot run out of: for tests whose subject is not the budget
# (leases, fencing, shutdown), so a render slowed down by load cannot fail its job.
LONG_BUDGET_TOML = "[limits]\nrender_base_s = 600.0\nrender_timeout_s = 600.0\n"
LONG_BUDGET_LIMITS = Limits(render_base_s=600.0, render_timeout_s=600.0)  # the same, for in-process Settings


def long_budget_config(folder: Path) -> dict[str, str]:
    """Environment entries that point docfence at a config with LONG_BUDGET_TOML (written in `folder`)."""
    path = folder / "long-budget.toml"
    path.write_text(LONG_BUDGET_TOML)
    return {"DOCFENCE_CONFIG": str(path)}
