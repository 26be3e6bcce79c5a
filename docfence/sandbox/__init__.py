"""One sandbox for untrusted-document work: a warm zygote forks a fresh child per job under limits.

`Sandbox.run(Task)` -> `Outcome`; the outcome mapping (crash, limit, engine bug, coded document error)
lives in `outcomes.py` only. The worker, the report dispatcher and `docfence watermark` all use it.

The names below are imported when first used, so a process can import `docfence.sandbox.launch` (or
the zygote its own modules) without the supervisor and its imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docfence.sandbox.outcomes import Outcome
    from docfence.sandbox.supervisor import Sandbox, Task

__all__ = ["Outcome", "Sandbox", "Task"]
_HOME = {"Outcome": "docfence.sandbox.outcomes", "Sandbox": "docfence.sandbox.supervisor",
         "Task": "docfence.sandbox.supervisor"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'docfence.sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)
