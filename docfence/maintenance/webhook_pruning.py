"""Pruning the webhook outbox: an event whose deliveries all finished (delivered or failed) is deleted
with its delivery and attempt rows once it is older than `[webhooks].keep_events_s`. Each attempt stays
on its job's audit chain (a `webhook_attempt` event), so what was sent where, and when, is never lost."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from docfence.core.errors import DocfenceError
from docfence.store.base import WebhookStore

log = logging.getLogger("docfence.webhooks")


@dataclass(frozen=True)
class PruneConfig:
    keep_s: float  # age after which a finished event goes
    batch: int = 500  # events one pass deletes at most

    def __post_init__(self) -> None:
        if self.keep_s <= 0 or self.batch < 1:
            raise DocfenceError("webhook pruning needs a positive keep_s and batch")


@dataclass
class PruneResult:
    pruned: list[str] = field(default_factory=list)  # event ids


class WebhookPruner:
    """One bounded pass per `run_once()`; passes on many machines at once are safe (PostgreSQL skips
    rows another pruner holds; SQLite has one writer)."""

    def __init__(self, store: WebhookStore, config: PruneConfig) -> None:
        self.store, self.config = store, config

    def run_once(self) -> PruneResult:
        pruned = self.store.prune_webhook_events(keep_s=self.config.keep_s, limit=self.config.batch)
        if pruned:
            log.info("pruned %d finished webhook events", len(pruned))
        return PruneResult(pruned)

    def run_until_done(self) -> int:
        """Passes until one finds nothing; the number of events deleted."""
        total = 0
        while (result := self.run_once()).pruned:
            total += len(result.pruned)
            if len(result.pruned) < self.config.batch:
                break
        return total
