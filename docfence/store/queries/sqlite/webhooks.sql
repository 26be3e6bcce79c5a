-- Webhooks: endpoints, the outbox of terminal-transition events, and fenced delivery attempts.

-- name: insert_webhook_endpoint
-- A new endpoint of a tenant with its signing secret.
INSERT INTO webhook_endpoints (id, tenant, url, events, secret, description, created_at, created_by)
VALUES (:id, :tenant, :url, :events, :secret, :description,
        coalesce(:now, (julianday('now') - 2440587.5) * 86400.0), :created_by)
RETURNING *;

-- name: get_webhook_endpoint
-- One endpoint by id.
SELECT * FROM webhook_endpoints WHERE id = :id;

-- name: list_webhook_endpoints
-- Endpoints, optionally of one tenant, oldest first (disabled ones too).
SELECT * FROM webhook_endpoints WHERE (:tenant IS NULL OR tenant = :tenant) ORDER BY created_at, id;

-- name: disable_webhook_endpoint
-- Disable an endpoint of :tenant (idempotent: the first disabling time stays).
UPDATE webhook_endpoints
   SET disabled_at = coalesce(disabled_at, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0))
 WHERE id = :id AND tenant = :tenant
RETURNING *;

-- name: rotate_webhook_secret
-- Replace an enabled endpoint's secret; the old one keeps signing alongside until :grace_s passed.
UPDATE webhook_endpoints
   SET previous_secret = secret, secret = :secret,
       secret_grace_until = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) + :grace_s
 WHERE id = :id AND tenant = :tenant AND disabled_at IS NULL
RETURNING *;

-- name: fail_endpoint_deliveries
-- An endpoint was disabled: its unfinished deliveries fail with :reason (a running attempt's late
-- outcome is still recorded on its attempt row, but no longer moves the delivery).
UPDATE webhook_deliveries
   SET state = 'failed', failure_reason = :reason, lease_owner = NULL,
       finished_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
 WHERE endpoint_id = :endpoint_id AND state IN ('pending', 'delivering');

-- name: insert_webhook_events
-- The outbox rows of a transaction's terminal transitions (:events is a JSON array of objects; `at` in
-- epoch seconds), in that same transaction: one statement however many jobs ended.
INSERT INTO webhook_events (id, tenant, type, job_id, attempt, report_request_id, payload, created_at)
SELECT json_extract(r.value, '$.id'), json_extract(r.value, '$.tenant'), json_extract(r.value, '$.type'),
       json_extract(r.value, '$.job_id'), json_extract(r.value, '$.attempt'),
       json_extract(r.value, '$.report_request_id'), json_extract(r.value, '$.payload'),
       json_extract(r.value, '$.at')
  FROM json_each(:events) AS r;

-- name: insert_webhook_deliveries
-- One pending delivery of each event of :events to every enabled endpoint of its tenant subscribed to
-- its type (an indexed probe of the tenant's endpoints; nothing when it has none).
INSERT INTO webhook_deliveries (event_id, endpoint_id, state, run_after, created_at)
SELECT json_extract(r.value, '$.id'), e.id, 'pending', json_extract(r.value, '$.at'), json_extract(r.value, '$.at')
  FROM json_each(:events) AS r
  JOIN webhook_endpoints AS e
    ON e.tenant = json_extract(r.value, '$.tenant') AND e.disabled_at IS NULL
   AND e.events LIKE '%,' || json_extract(r.value, '$.type') || ',%';

-- name: fail_overdue_webhook_deliveries
-- Deliveries not delivered within :deadline_s of their event (pending, or a lost lease) fail.
UPDATE webhook_deliveries
   SET state = 'failed', lease_owner = NULL, finished_at = t.now,
       failure_reason = 'deadline_exceeded: not delivered within ' || CAST(:deadline_s AS INTEGER) ||
                        ' s' || coalesce(' (last: ' || failure_reason || ')', '')
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE webhook_deliveries.rowid IN (
        SELECT d.rowid FROM webhook_deliveries AS d
         WHERE d.state IN ('pending', 'delivering')
           AND d.run_after <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
           AND d.created_at + :deadline_s <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
         LIMIT :limit)
RETURNING event_id, endpoint_id, failure_reason,
          (SELECT e.job_id FROM webhook_events AS e WHERE e.id = webhook_deliveries.event_id) AS job_id;

-- name: claim_webhook_deliveries
-- Lease up to :limit due deliveries (pending and due, or delivering with an expired lease):
-- attempt += 1, lease for :lease_s from the store's clock. A delivery whose endpoint was disabled (one
-- inserted by a terminal transition racing the disable) is not leased: it fails as endpoint_disabled.
UPDATE webhook_deliveries
   SET state = CASE WHEN p.disabled_at IS NULL THEN 'delivering' ELSE 'failed' END,
       attempt = attempt + CASE WHEN p.disabled_at IS NULL THEN 1 ELSE 0 END,
       lease_owner = CASE WHEN p.disabled_at IS NULL THEN :worker END,
       run_after = CASE WHEN p.disabled_at IS NULL THEN t.now + :lease_s ELSE run_after END,
       failure_reason = CASE WHEN p.disabled_at IS NULL THEN failure_reason ELSE 'endpoint_disabled' END,
       finished_at = CASE WHEN p.disabled_at IS NULL THEN finished_at ELSE t.now END
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t, webhook_endpoints AS p
 WHERE p.id = webhook_deliveries.endpoint_id
   AND webhook_deliveries.rowid IN (
        SELECT d.rowid FROM webhook_deliveries AS d
         WHERE d.state IN ('pending', 'delivering')
           AND d.run_after <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
         ORDER BY d.run_after, d.event_id
         LIMIT :limit)
   AND webhook_deliveries.state IN ('pending', 'delivering')
RETURNING *, run_after - :lease_s AS claimed_at;

-- name: abandon_webhook_attempts
-- The attempts of a re-claimed delivery that never reported: their dispatcher lost its lease (each
-- returned, for its audit event: the request may have reached the receiver).
UPDATE webhook_attempts
   SET ended_at = :ended_at, outcome = 'abandoned', error = 'the dispatcher lost its lease before recording an outcome'
 WHERE event_id = :event_id AND endpoint_id = :endpoint_id AND ended_at IS NULL
RETURNING attempt, dispatcher;

-- name: insert_webhook_attempt
-- One row per delivery attempt; its outcome is filled in by end_webhook_attempt.
INSERT INTO webhook_attempts (event_id, endpoint_id, attempt, dispatcher, claimed_at)
VALUES (:event_id, :endpoint_id, :attempt, :dispatcher, :claimed_at);

-- name: get_webhook_event
-- One outbox event by id.
SELECT * FROM webhook_events WHERE id = :id;

-- name: end_webhook_attempt
-- The outcome of one attempt (also when its delivery was meanwhile re-claimed: evidence of what happened).
UPDATE webhook_attempts
   SET ended_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0), outcome = :outcome,
       status_code = :status_code, latency_ms = :latency_ms, error = :error, body_prefix = :body_prefix
 WHERE event_id = :event_id AND endpoint_id = :endpoint_id AND attempt = :attempt;

-- name: finish_webhook_delivery
-- Fenced outcome of the current attempt: delivered, failed, or pending again after :delay_s.
UPDATE webhook_deliveries
   SET state = :to_state, lease_owner = NULL, run_after = t.now + :delay_s, last_status = :status_code,
       failure_reason = :reason, finished_at = CASE WHEN :to_state = 'pending' THEN NULL ELSE t.now END
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE event_id = :event_id AND endpoint_id = :endpoint_id AND attempt = :attempt
   AND state = 'delivering' AND lease_owner = :worker
RETURNING *;

-- name: list_webhook_events_for_job
-- A job's outbox events, oldest first.
SELECT * FROM webhook_events WHERE job_id = :job_id ORDER BY created_at, id;

-- name: list_webhook_deliveries_for_job
-- The deliveries of a job's events, with each endpoint's URL.
SELECT d.*, e.type, p.url FROM webhook_deliveries AS d
  JOIN webhook_events AS e ON e.id = d.event_id
  JOIN webhook_endpoints AS p ON p.id = d.endpoint_id
 WHERE e.job_id = :job_id ORDER BY d.created_at, d.event_id, d.endpoint_id;

-- name: list_webhook_attempts_for_job
-- Every delivery attempt of a job's events, in order.
SELECT a.* FROM webhook_attempts AS a JOIN webhook_events AS e ON e.id = a.event_id
 WHERE e.job_id = :job_id ORDER BY a.claimed_at, a.event_id, a.endpoint_id, a.attempt;

-- name: count_webhook_deliveries
-- Deliveries by state (metrics and `docfence webhooks list --json`).
SELECT state, count(*) AS n FROM webhook_deliveries GROUP BY state;

-- name: webhook_deliveries_due
-- Whether any delivery is due (a read, so an idle dispatcher's pass takes no write lock).
SELECT 1 AS due FROM webhook_deliveries
 WHERE state IN ('pending', 'delivering') AND run_after <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
 LIMIT 1;

-- name: postpone_endpoint_deliveries
-- An attempt to :endpoint_id failed: its other pending deliveries wait at least as long, so a receiver
-- that is down costs one attempt per backoff period, not one per event (and delays no other endpoint).
UPDATE webhook_deliveries
   SET run_after = max(run_after, t.now + :delay_s)
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE endpoint_id = :endpoint_id AND state = 'pending';

-- name: select_prunable_webhook_events
-- Up to :limit outbox events created more than :keep_s before now whose deliveries all finished
-- (delivered or failed), oldest first.
SELECT e.id FROM webhook_events AS e
 WHERE e.created_at < coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) - :keep_s
   AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS d
                    WHERE d.event_id = e.id AND d.state IN ('pending', 'delivering'))
 ORDER BY e.created_at
 LIMIT :limit;

-- name: delete_webhook_attempts_of_events
-- The attempt rows of the events in :ids (a JSON array of event ids).
DELETE FROM webhook_attempts WHERE event_id IN (SELECT value FROM json_each(:ids));

-- name: delete_webhook_deliveries_of_events
-- The delivery rows of the events in :ids (a JSON array of event ids).
DELETE FROM webhook_deliveries WHERE event_id IN (SELECT value FROM json_each(:ids));

-- name: delete_webhook_events
-- The outbox events in :ids (a JSON array of event ids), after their deliveries and attempts.
DELETE FROM webhook_events WHERE id IN (SELECT value FROM json_each(:ids));
