"""The webhook dispatcher: claims due deliveries of outbox events with a lease, signs each with the
Standard Webhooks scheme, sends it through the SSRF-guarded transport, and records every attempt.

A 2xx answer delivers; anything else is retried with exponential backoff and jitter until the event's
delivery deadline, then the delivery fails with its last reason. A refused destination fails at once.
`run_once()` is one bounded pass (tests call it directly); `run_forever()` runs it under the one loop
supervisor (docfence.core.loops).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from dataclasses import dataclass, field
from datetime import timedelta

from prometheus_client import Counter
from standardwebhooks.webhooks import Webhook

from docfence.config import WebhooksConfig
from docfence.core import loops
from docfence.core.clock import Clock, SystemClock, monotonic
from docfence.core.records import AttemptResult, DeliveryClaim
from docfence.faults import fault_point
from docfence.maintenance.webhook_http import (
    AddressPolicy,
    DestinationRefused,
    GuardedTransport,
    Sent,
    Timeouts,
)
from docfence.maintenance.webhook_pruning import PruneConfig, WebhookPruner
from docfence.observability import metrics
from docfence.store.base import WebhookStore

log = logging.getLogger("docfence.webhooks")
USER_AGENT = "docfence-webhooks/1"
DELIVERIES = Counter("docfence_webhook_deliveries_total",
                     "Webhook delivery attempts by outcome (delivered, retry, failed, stale).", ["outcome"])


@dataclass
class DispatchResult:
    delivered: list[str] = field(default_factory=list)  # "event_id/endpoint_id"
    retried: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    overdue: list[str] = field(default_factory=list)  # failed by the deadline without an attempt
    stale: list[str] = field(default_factory=list)  # the attempt no longer owned its delivery

    def busy(self) -> bool:
        """Whether the pass did anything (then more may be due: the next pass starts at once)."""
        return any((self.delivered, self.retried, self.failed, self.overdue, self.stale))


class WebhookDispatcher:
    """One dispatcher (`worker` names it in leases and attempt rows). `clock` stamps the signature
    (receivers compare it with their own time) and measures latency; the store's clock decides what is
    due. `rng` draws the jitter; tests inject both, and a transport."""

    def __init__(self, store: WebhookStore, config: WebhooksConfig, *, worker: str,
                 clock: Clock | None = None, rng: random.Random | None = None,
                 transport: GuardedTransport | None = None, interval_s: float = 1.0) -> None:
        self.store, self.config, self.worker = store, config, worker
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.interval_s = interval_s
        self.pruner = WebhookPruner(self.store, PruneConfig(config.keep_events_s))
        self.prune_interval_s = 600.0  # finished events go days after their time: no hurry
        self._last_prune = float("-inf")
        self.transport = transport or GuardedTransport(
            AddressPolicy(config.allow_hosts),
            Timeouts(config.connect_timeout_s, config.read_timeout_s, total_s=config.lease_s / 2),
            clock=self.clock)

    def run_once(self) -> DispatchResult:
        result = DispatchResult()
        if not self.store.webhook_deliveries_due():  # idle: no write transaction at all
            return result
        for event_id, endpoint_id in self.store.fail_overdue_webhook_deliveries(
                deadline_s=self.config.delivery_deadline_s, limit=self.config.batch):
            result.overdue.append(f"{event_id}/{endpoint_id}")
            DELIVERIES.labels("failed").inc()
        for _ in range(self.config.batch):
            # one claim right before each attempt: a slow receiver never eats the lease of the next
            claims = self.store.claim_webhook_deliveries(self.worker, limit=1, lease_s=self.config.lease_s)
            if not claims:
                break
            self.deliver(claims[0], result)
        return result

    def deliver(self, claim: DeliveryClaim, result: DispatchResult) -> None:
        """One attempt of one claimed delivery, recorded whatever happens to the request."""
        key = f"{claim.event_id}/{claim.endpoint_id}"
        body = self.body(claim)
        try:
            sent = self.transport.send(claim.url, body.encode(), self.headers(claim, body))
        except DestinationRefused as exc:
            self._finish(claim, AttemptResult("failed", error=str(exc)), "failed", 0.0,
                         f"destination_refused: {exc}", key, result.failed)
            return
        except Exception as exc:  # one endpoint's odd failure must not stop every tenant's
            # deliveries: it becomes this attempt's recorded error and is retried like any other
            log.warning("webhook %s attempt %d: %s", claim.event_id, claim.attempt, type(exc).__name__)
            sent = Sent(None, 0.0, f"delivery error: {type(exc).__name__}")
        fault_point("webhook_sent")  # the receiver has it; nothing is recorded yet
        if sent.status_code is not None and 200 <= sent.status_code < 300:
            self._finish(claim, _result("delivered", sent), "delivered", 0.0, None, key, result.delivered)
            return
        reason = sent.error or f"HTTP {sent.status_code}"
        delay = self.backoff(claim.attempt)
        deadline = claim.event_created_at + timedelta(seconds=self.config.delivery_deadline_s)
        if claim.claimed_at + timedelta(seconds=delay) >= deadline:
            self._finish(claim, _result("failed", sent), "failed", 0.0,
                         f"deadline_exceeded after {claim.attempt} attempts (last: {reason})", key,
                         result.failed)
        else:
            self._finish(claim, _result("retry", sent), "pending", delay, reason, key, result.retried)

    def _finish(self, claim: DeliveryClaim, attempt: AttemptResult, to_state: str, delay_s: float,
                reason: str | None, key: str, bucket: list[str]) -> None:
        if self.store.finish_webhook_delivery(claim, attempt, to_state=to_state, delay_s=delay_s,
                                              reason=reason):
            bucket.append(key)
            DELIVERIES.labels(attempt.outcome).inc()
            log.info("webhook %s delivery attempt %d to endpoint %s: %s", claim.event_id, claim.attempt,
                     claim.endpoint_id, attempt.outcome,
                     extra={"job_id": claim.job_id, "attempt": claim.job_attempt})
        else:
            DELIVERIES.labels("stale").inc()

    def backoff(self, attempt: int) -> float:
        """base * 2^(attempt-1), at most backoff_max_s, scaled by a random factor in [0.5, 1.0)."""
        cap = min(self.config.backoff_max_s, self.config.backoff_base_s * 2.0 ** min(attempt - 1, 40))
        return cap * (0.5 + 0.5 * self.rng.random())

    def body(self, claim: DeliveryClaim) -> str:
        """The stored payload with its API links made absolute when `public_url` is set."""
        if not self.config.public_url:
            return claim.payload
        payload = json.loads(claim.payload)
        base = self.config.public_url.rstrip("/")
        links = payload.get("data", {}).get("links", {})
        payload["data"]["links"] = {name: base + path for name, path in links.items()}
        return json.dumps(payload, sort_keys=True, separators=(",", ":"))

    def headers(self, claim: DeliveryClaim, body: str) -> dict[str, str]:
        """Standard Webhooks headers: one `v1,` signature per live secret (two during a rotation)."""
        at = self.clock.now()
        signature = " ".join(Webhook(secret).sign(claim.event_id, at, body) for secret in claim.secrets)
        return {"content-type": "application/json", "user-agent": USER_AGENT, "webhook-id": claim.event_id,
                "webhook-timestamp": str(int(at.timestamp())), "webhook-signature": signature,
                "docfence-attempt": str(claim.attempt)}

    def run_forever(self, stop: threading.Event) -> None:
        """Pass after pass under the one loop supervisor (core.loops: any exception is logged, counted
        as `webhooks` in docfence_loop_errors_total, and the next pass follows); waits `interval_s` (or
        until `stop`) after a pass that found nothing."""
        loops.run_forever("webhooks", self.run_pass, interval_s=self.interval_s, stop=stop,
                          record_error=metrics.record_loop_error, busy=DispatchResult.busy, logger=log)

    def run_pass(self) -> DispatchResult:
        """`run_once()`, and every `prune_interval_s` first a prune of the outbox's finished events
        (webhook_pruning.py)."""
        if monotonic() - self._last_prune >= self.prune_interval_s:
            self._last_prune = monotonic()
            self.pruner.run_until_done()
        return self.run_once()


def _result(outcome: str, sent: Sent) -> AttemptResult:
    return AttemptResult(outcome, sent.status_code, sent.latency_ms, sent.error, sent.body_prefix)
