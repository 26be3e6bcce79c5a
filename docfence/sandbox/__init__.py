"""One sandbox for untrusted-document work: a warm zygote forks a fresh child per job under limits.

`Sandbox.run(Task)` -> `Outcome`; the outcome mapping (crash, limit, engine bug, coded document error)
lives in `outcomes.py` only. The worker, the report dispatcher and `docfence watermark` all use it.
"""

from docfence.sandbox.outcomes import Outcome
from docfence.sandbox.supervisor import Sandbox, Task

__all__ = ["Outcome", "Sandbox", "Task"]
