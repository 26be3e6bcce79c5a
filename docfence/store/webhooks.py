"""The WebhookStore of the SQL stores: endpoints per tenant, and fenced delivery attempts of outbox events
(their records live in core/records/webhooks.py).

A mixin of SqlStore over the named queries of queries/<dialect>/webhooks.sql. The outbox rows themselves
are written by the job transitions (store/outbox.py); this module claims and finishes their deliveries
the way jobs are claimed and finished: attempt += 1 on claim, outcome fenced on (attempt, owner, state).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from docfence.core.errors import NotFound
from docfence.core.records.webhooks import (
    AttemptResult,
    DeliveryClaim,
    WebhookActivity,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from docfence.store.sqlbase import Row, SqlBase, Tx

WEBHOOKS_CHAIN = "webhooks"  # the audit chain of endpoint changes
DELIVERY_STATES = ("pending", "delivering", "delivered", "failed")


def _endpoint(row: Row) -> WebhookEndpoint:
    values = {name: row[name] for name in WebhookEndpoint.__dataclass_fields__}
    values["events"] = tuple(e for e in str(row["events"]).split(",") if e)
    return WebhookEndpoint(**values)


def _pick(cls: type[Any], row: Row) -> Any:
    return cls(**{name: row[name] for name in cls.__dataclass_fields__})


class WebhookQueries(SqlBase):
    """Webhook methods of SqlStore; each runs named queries inside one `self._tx()`."""

    # -- endpoints ---------------------------------------------------------------------------------
    def insert_webhook_endpoint(
        self, endpoint_id: str, *, tenant: str, url: str, events: tuple[str, ...], secret: str,
        description: str | None, actor: str,
    ) -> WebhookEndpoint:
        with self._tx() as tx:
            row = tx.one("insert_webhook_endpoint", id=endpoint_id, tenant=tenant, url=url,
                         events="," + ",".join(events) + ",", secret=secret, description=description,
                         created_by=actor, now=self._now_param())
            assert row is not None
            self._audit(tx, "webhook_endpoint_created", actor, row, events=list(events))
        return _endpoint(row)

    def get_webhook_endpoint(self, endpoint_id: str) -> WebhookEndpoint:
        with self._tx(write=False) as tx:
            row = tx.one("get_webhook_endpoint", id=endpoint_id)
        if row is None:
            raise NotFound(f"no webhook endpoint {endpoint_id}")
        return _endpoint(row)

    def list_webhook_endpoints(self, tenant: str | None = None) -> list[WebhookEndpoint]:
        with self._tx(write=False) as tx:
            return [_endpoint(r) for r in tx.all("list_webhook_endpoints", tenant=tenant)]

    def disable_webhook_endpoint(self, endpoint_id: str, *, tenant: str, actor: str) -> WebhookEndpoint:
        """Stop delivering to the endpoint: its unfinished deliveries fail as "endpoint_disabled".
        NotFound for another tenant's endpoint, exactly as for a missing one."""
        with self._tx() as tx:
            row = tx.one("disable_webhook_endpoint", id=endpoint_id, tenant=tenant, now=self._now_param())
            if row is None:
                raise NotFound(f"no webhook endpoint {endpoint_id}")
            tx.send("fail_endpoint_deliveries", endpoint_id=endpoint_id, reason="endpoint_disabled",
                    now=self._now_param())
            self._audit(tx, "webhook_endpoint_disabled", actor, row)
        return _endpoint(row)

    def rotate_webhook_secret(
        self, endpoint_id: str, *, tenant: str, secret: str, grace_s: float, actor: str
    ) -> WebhookEndpoint:
        """A new secret; the previous one keeps signing alongside it for `grace_s` seconds."""
        with self._tx() as tx:
            row = tx.one("rotate_webhook_secret", id=endpoint_id, tenant=tenant, secret=secret,
                         grace_s=float(grace_s), now=self._now_param())
            if row is None:
                raise NotFound(f"no enabled webhook endpoint {endpoint_id}")
            self._audit(tx, "webhook_secret_rotated", actor, row, grace_s=grace_s)
        return _endpoint(row)

    def _audit(self, tx: Tx, action: str, actor: str, row: Row, **extra: Any) -> None:
        # the host only: a URL's path or query may carry the receiver's own token
        details = {"endpoint_id": row["id"], "tenant": row["tenant"], "host": urlsplit(row["url"]).hostname,
                   **extra}
        self._append_event(tx, action, actor=actor, job_id=None, reason=None, details=details,
                           chain=WEBHOOKS_CHAIN)

    # -- deliveries --------------------------------------------------------------------------------
    def claim_webhook_deliveries(self, worker: str, *, limit: int, lease_s: float) -> list[DeliveryClaim]:
        """Lease up to `limit` due deliveries; a re-claimed one's unreported attempt becomes "abandoned".
        A due delivery of a disabled endpoint is not returned: the claim failed it ("endpoint_disabled")."""
        claims: list[DeliveryClaim] = []
        with self._tx() as tx:
            # claim again while disabled endpoints' rows filled the batch: each such row leaves the due
            # set (it is failed), so this ends, and a due delivery is never left for the next pass
            while len(claims) < limit:
                rows = tx.all("claim_webhook_deliveries", worker=worker, limit=limit - len(claims),
                              lease_s=float(lease_s), now=self._now_param())
                if not rows:
                    break
                for row in rows:
                    keys = {"event_id": row["event_id"], "endpoint_id": row["endpoint_id"]}
                    if row["state"] == "failed":
                        self._fail_disabled(tx, keys)
                        continue
                    claims.append(self._lease_attempt(tx, row, keys, worker))
        return claims

    def _lease_attempt(self, tx: Tx, row: Row, keys: dict[str, Any], worker: str) -> DeliveryClaim:
        event = tx.one("get_webhook_event", id=row["event_id"])
        endpoint = tx.one("get_webhook_endpoint", id=row["endpoint_id"])
        assert event is not None and endpoint is not None
        self._abandon(tx, keys, row["claimed_at"], event["job_id"])
        tx.send("insert_webhook_attempt", attempt=row["attempt"], dispatcher=worker,
                claimed_at=row["claimed_at"], **keys)
        return _claim(row, event, endpoint, worker)

    def _abandon(self, tx: Tx, keys: dict[str, Any], ended_at: Any, job_id: str) -> None:
        """End the delivery's unreported attempts as "abandoned", each with a `webhook_attempt` event on
        the job's chain: its request may have reached the receiver, and the outbox rows get pruned."""
        for gone in tx.all("abandon_webhook_attempts", ended_at=ended_at, **keys):
            self._append_event(tx, "webhook_attempt", actor=gone["dispatcher"], job_id=job_id,
                               reason="abandoned", chain=job_id, details={
                                   **keys, "delivery_attempt": gone["attempt"],
                                   "error": "the dispatcher lost its lease before recording an outcome"})

    def _fail_disabled(self, tx: Tx, keys: dict[str, Any]) -> None:
        # the delivery was inserted by a terminal transition racing its endpoint's disable
        event = tx.one("get_webhook_event", id=keys["event_id"])
        assert event is not None
        self._abandon(tx, keys, self._now_param() or self._db_now(tx), event["job_id"])
        self._append_event(tx, "webhook_failed", actor="webhooks", job_id=event["job_id"],
                           reason="endpoint_disabled", chain=event["job_id"],
                           details={**keys, "failure_reason": "endpoint_disabled"})

    def finish_webhook_delivery(
        self, claim: DeliveryClaim, result: AttemptResult, *, to_state: str, delay_s: float = 0.0,
        reason: str | None = None,
    ) -> bool:
        """Record the attempt's result, and move the delivery to `to_state` (pending after `delay_s`,
        delivered or failed) when the attempt is still current. False when it was not: another
        dispatcher re-claimed it, or its endpoint was disabled; only the attempt row was written."""
        if to_state not in ("pending", "delivered", "failed"):
            raise ValueError(f"a delivery attempt cannot end in {to_state}")
        keys = {"event_id": claim.event_id, "endpoint_id": claim.endpoint_id, "attempt": claim.attempt}
        with self._tx() as tx:
            tx.send("end_webhook_attempt", outcome=result.outcome, status_code=result.status_code,
                    latency_ms=result.latency_ms, error=result.error, body_prefix=result.body_prefix,
                    now=self._now_param(), **keys)
            row = tx.one("finish_webhook_delivery", to_state=to_state, delay_s=float(delay_s),
                         status_code=result.status_code, reason=reason, worker=claim.worker,
                         now=self._now_param(), **keys)
            if row is not None and to_state == "pending":
                tx.send("postpone_endpoint_deliveries", endpoint_id=claim.endpoint_id, delay_s=float(delay_s),
                        now=self._now_param())
            # on the job's own audit chain: its events (API, inspect, console) show every attempt
            self._append_event(tx, "webhook_attempt", actor=claim.worker, job_id=claim.job_id,
                               reason=result.outcome, chain=claim.job_id, details={
                                   "event_id": claim.event_id, "type": claim.event_type,
                                   "endpoint_id": claim.endpoint_id, "host": urlsplit(claim.url).hostname,
                                   "delivery_attempt": claim.attempt, "status_code": result.status_code,
                                   "latency_ms": result.latency_ms, "error": result.error,
                                   "delivery": to_state if row is not None else "stale",
                                   "failure_reason": reason if to_state == "failed" else None})
        return row is not None

    def fail_overdue_webhook_deliveries(
        self, *, deadline_s: float, limit: int = 100
    ) -> list[tuple[str, str]]:
        """Fail deliveries still unfinished `deadline_s` after their event ("deadline_exceeded")."""
        with self._tx() as tx:
            rows = tx.all("fail_overdue_webhook_deliveries", deadline_s=float(deadline_s), limit=limit,
                          now=self._now_param())
            for row in rows:
                self._abandon(tx, {"event_id": row["event_id"], "endpoint_id": row["endpoint_id"]},
                              self._now_param() or self._db_now(tx), row["job_id"])
                self._append_event(tx, "webhook_failed", actor="webhooks", job_id=row["job_id"],
                                   reason="deadline_exceeded", chain=row["job_id"],
                                   details={"event_id": row["event_id"], "endpoint_id": row["endpoint_id"],
                                            "failure_reason": row["failure_reason"]})
        return [(r["event_id"], r["endpoint_id"]) for r in rows]

    def prune_webhook_events(self, *, keep_s: float, limit: int = 100) -> list[str]:
        """Delete up to `limit` outbox events created over `keep_s` ago whose deliveries all finished,
        with their delivery and attempt rows; returns their ids. The jobs' audit chains keep a
        `webhook_attempt` event per attempt, so the evidence of each delivery outlives its outbox rows."""
        with self._tx() as tx:
            rows = tx.all("select_prunable_webhook_events", keep_s=float(keep_s), limit=limit,
                          now=self._now_param())
            ids = [str(row["id"]) for row in rows]
            if ids:
                for query in ("delete_webhook_attempts_of_events", "delete_webhook_deliveries_of_events",
                              "delete_webhook_events"):
                    tx.send(query, ids=json.dumps(ids))
        return ids

    # -- reads -------------------------------------------------------------------------------------
    def webhook_deliveries_due(self) -> bool:
        with self._tx(write=False) as tx:
            return tx.one("webhook_deliveries_due", now=self._now_param()) is not None

    def webhook_activity(self, job_id: str) -> WebhookActivity:
        with self._tx(write=False) as tx:
            events = tx.all("list_webhook_events_for_job", job_id=job_id)
            deliveries = tx.all("list_webhook_deliveries_for_job", job_id=job_id)
            attempts = tx.all("list_webhook_attempts_for_job", job_id=job_id)
        return WebhookActivity(
            events={e["id"]: (e["type"], e["payload"]) for e in events},
            deliveries=[_pick(WebhookDelivery, r) for r in deliveries],
            attempts=[_pick(WebhookAttempt, r) for r in attempts],
        )

    def count_webhook_deliveries(self) -> dict[str, int]:
        counts = dict.fromkeys(DELIVERY_STATES, 0)
        with self._tx(write=False) as tx:
            for row in tx.all("count_webhook_deliveries"):
                counts[row["state"]] = int(row["n"])
        return counts


def _claim(row: Row, event: Row, endpoint: Row, worker: str) -> DeliveryClaim:
    secrets = [endpoint["secret"]]
    grace = endpoint["secret_grace_until"]
    if endpoint["previous_secret"] and grace is not None and grace > row["claimed_at"]:
        secrets.append(endpoint["previous_secret"])
    return DeliveryClaim(
        event_id=row["event_id"], endpoint_id=row["endpoint_id"], attempt=int(row["attempt"]), worker=worker,
        claimed_at=row["claimed_at"], lease_expires_at=row["run_after"], event_created_at=row["created_at"],
        event_type=event["type"], job_id=event["job_id"], job_attempt=int(event["attempt"]),
        payload=event["payload"], url=endpoint["url"],
        secrets=tuple(secrets),
    )
