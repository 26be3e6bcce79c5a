"""The config of a maintenance service whose pass is one bounded batch of rows."""

from __future__ import annotations

from dataclasses import dataclass

from docfence.core.errors import DocfenceError


@dataclass(frozen=True)
class BatchConfig:
    batch: int = 100  # rows one pass may change

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise DocfenceError("reconciler batch must be positive")
