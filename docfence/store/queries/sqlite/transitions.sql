-- The job transitions of the SQLite store, one query per row name of core/states.py's TRANSITIONS, in
-- the table's order (same names as postgres/transitions.sql). The store passes the row's answer:
-- :to_state (its target), :from_state (its source) and :attempt_bump; a fenced statement that matches
-- no row changed nothing and the caller raises StaleAttempt. `:now` is the injected clock or NULL
-- (then the database clock). Times are REAL unix epoch seconds.

-- name: submitted
-- Create queued jobs (one, or a batch submission): :items is a JSON array of insert parameters (policy
-- as JSON text), inserted in array order (the caller sorts them by key so concurrent batches never
-- deadlock); deadline and retention derive from the store's clock. A row whose id or idempotency key
-- is taken is skipped (not returned); the caller resolves it as a replay or a conflict.
INSERT INTO jobs (id, tenant, kind, document_class, mode, region, policy, state, attempt, max_attempts,
                  lease_ttl_s, retry_backoff_s, deadline_at, run_after, retention_until, idempotency_key,
                  request_hash, input_key, input_sha256, input_bytes, parent_job_id, report_request_id,
                  label, filename, sealed_password, data_key_provider, data_key_kek_id, data_key_wrapped,
                  created_at, updated_at, audit_seq)
SELECT i.value ->> '$.id', i.value ->> '$.tenant', i.value ->> '$.kind', i.value ->> '$.document_class',
       i.value ->> '$.mode', i.value ->> '$.region', i.value ->> '$.policy', :to_state, 0,
       i.value ->> '$.max_attempts', i.value ->> '$.lease_ttl_s', i.value ->> '$.retry_backoff_s',
       t.now + (i.value ->> '$.deadline_s'), t.now, t.now + (i.value ->> '$.retention_s'),
       i.value ->> '$.idempotency_key', i.value ->> '$.request_hash', i.value ->> '$.input_key',
       i.value ->> '$.input_sha256', i.value ->> '$.input_bytes', i.value ->> '$.parent_job_id',
       i.value ->> '$.report_request_id', i.value ->> '$.label', i.value ->> '$.filename',
       i.value ->> '$.sealed_password', i.value ->> '$.data_key_provider', i.value ->> '$.data_key_kek_id',
       i.value ->> '$.data_key_wrapped', t.now, t.now, 1
FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t, json_each(:items) AS i
WHERE true
ON CONFLICT DO NOTHING
RETURNING *;

-- name: claim_plan
-- Nothing to set: lease_acquired names its index with INDEXED BY (PostgreSQL disables sorting instead).
SELECT 1;

-- name: lease_acquired
-- Lease up to :limit due queued jobs of one kind of work: attempt += :attempt_bump, lease from the
-- store's clock; skips paused modes. :processors NULL is the workers' work (watermark jobs and report
-- jobs rendered here); a JSON array of provider names is the dispatcher's (report jobs those outside
-- renderers render). The source state stays a literal: it is the predicate of jobs_claim_idx.
UPDATE jobs
   SET state = :to_state, attempt = attempt + :attempt_bump, lease_owner = :worker,
       lease_expires_at = t.now + lease_ttl_s, heartbeat_at = t.now, claimed_at = t.now,
       updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE jobs.id IN (
        SELECT q.id FROM jobs AS q INDEXED BY jobs_claim_idx
         WHERE q.state = 'queued'
           AND q.run_after <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
           AND q.deadline_at > coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
           AND NOT EXISTS (SELECT 1 FROM claim_pauses p WHERE p.scope IN ('all', q.mode))
           AND CASE WHEN :processors IS NULL
                    THEN q.kind <> 'report'
                         OR coalesce(json_extract(q.policy, '$.report.processor'), 'local') = 'local'
                    ELSE q.kind = 'report'
                         AND json_extract(q.policy, '$.report.processor') IN (SELECT value FROM json_each(:processors))
               END
         ORDER BY q.run_after, q.id
         LIMIT :limit)
   AND +jobs.state = 'queued'  -- unary +: look each picked id up by key, not every queued row by state
RETURNING *,
          -- the previous event of the job's chain, for the event this transition appends
          (SELECT e.hash FROM audit_events AS e WHERE e.chain = jobs.id AND e.chain_seq = jobs.audit_seq - 1) AS prev_hash;

-- name: artifact_committed
-- Fenced success of several attempts of :worker (:items is a JSON array of [job_id, attempt]). Each
-- row is fenced on its own id, attempt, state, owner and unexpired lease: a stale item is absent
-- from the result. Rows are found through the primary key, one lookup per item (the unary + keeps
-- the planner off the state indexes, which would scan every rendering job).
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = NULL, last_error_message = NULL, run_after = t.now,
       finished_at = t.now, updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t,
       (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
          FROM json_each(:items)) AS v
 WHERE jobs.id = v.id AND jobs.attempt = v.attempt
   AND +jobs.state = :from_state AND jobs.lease_owner = :worker AND jobs.lease_expires_at > t.now
RETURNING *,
          -- the previous event of the job's chain, for the event this transition appends
          (SELECT e.hash FROM audit_events AS e WHERE e.chain = jobs.id AND e.chain_seq = jobs.audit_seq - 1) AS prev_hash;

-- name: error_reported
-- Fenced end of the current attempt by its worker's error (permanent_error, retryable_error,
-- retries_exhausted): failed, or queued again after :delay_s.
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       run_after = t.now + :delay_s,
       finished_at = CASE WHEN :to_state IN ('succeeded', 'failed', 'canceled') THEN t.now END,
       updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt
   AND lease_owner = :worker AND lease_expires_at > t.now
RETURNING *;

-- name: select_expired_leases
-- Candidates of lease_expired: rendering jobs whose lease has expired (never a valid lease), oldest
-- first, bounded.
SELECT id, attempt, max_attempts, lease_expires_at FROM jobs INDEXED BY jobs_rendering_idx
 WHERE state = 'rendering'
   AND lease_expires_at <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
 ORDER BY lease_expires_at, id LIMIT :limit;

-- name: skipped_expired_leases
-- The expired leases select_expired_leases skipped because another session held their row lock: the
-- same predicate read again without locking, minus the candidates it took (:taken, a JSON array of
-- ids), up to the order key of its last candidate when its batch was full (:last_at, :last_id; NULL
-- when it was not: every due row was reachable).
-- SQLite has one writer: inside the pass's write transaction no row is ever skipped (this finds none).
SELECT id, attempt, state, lease_ttl_s, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now FROM jobs INDEXED BY jobs_rendering_idx
 WHERE state = 'rendering'
   AND lease_expires_at <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
   AND (:last_id IS NULL OR lease_expires_at < :last_at OR (lease_expires_at = :last_at AND id < :last_id))
   AND id NOT IN (SELECT value FROM json_each(:taken))
 ORDER BY lease_expires_at, id LIMIT :limit;

-- name: lock_expired_lease
-- Escalation of one expired lease the passes kept skipping: lock that row, WAITING for the session that
-- holds it (bounded by set_lock_timeout), and only while it is still this attempt with an expired
-- lease (re-checked on the row's newest version once the lock is granted).
-- SQLite: the write transaction already holds the one write lock (taken within the busy timeout).
SELECT id, attempt, max_attempts, lease_expires_at FROM jobs
 WHERE id = :id AND attempt = :attempt AND state = 'rendering'
   AND lease_expires_at <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0);

-- name: lease_expired
-- Requeue (or fail) one expired lease, re-checking expiry under the write lock. run_after is kept,
-- so a rescued job goes back to its place ahead of newer work instead of the end of the queue.
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       finished_at = CASE WHEN :to_state = 'failed' THEN t.now END,
       updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt AND lease_expires_at <= t.now
RETURNING *;

-- name: lease_released
-- Fenced hand-back of the current attempt's lease (graceful shutdown): queued again at once.
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = NULL, last_error_message = NULL, run_after = t.now,
       finished_at = NULL, updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt
   AND lease_owner = :worker AND lease_expires_at > t.now
RETURNING *;

-- name: select_past_deadline
-- Candidates of deadline_reached: non-terminal jobs past their deadline, bounded.
SELECT id, attempt, state, deadline_at FROM jobs INDEXED BY jobs_deadline_idx
 WHERE state IN ('queued', 'rendering')
   AND deadline_at <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
 ORDER BY deadline_at, id LIMIT :limit;

-- name: skipped_past_deadline
-- The jobs past their deadline select_past_deadline skipped because another session held their row
-- lock (as skipped_expired_leases, by the order key deadline_at, id).
-- SQLite has one writer: inside the pass's write transaction no row is ever skipped (this finds none).
SELECT id, attempt, state, lease_ttl_s, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now FROM jobs INDEXED BY jobs_deadline_idx
 WHERE state IN ('queued', 'rendering')
   AND deadline_at <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
   AND (:last_id IS NULL OR deadline_at < :last_at OR (deadline_at = :last_at AND id < :last_id))
   AND id NOT IN (SELECT value FROM json_each(:taken))
 ORDER BY deadline_at, id LIMIT :limit;

-- name: lock_past_deadline
-- Escalation of one job past its deadline the passes kept skipping: lock that row, waiting for its
-- holder (bounded by set_lock_timeout), while it is still this attempt, not terminal, past its deadline.
-- SQLite: the write transaction already holds the one write lock (taken within the busy timeout).
SELECT id, attempt, state, deadline_at FROM jobs
 WHERE id = :id AND attempt = :attempt AND state IN ('queued', 'rendering')
   AND deadline_at <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0);

-- name: deadline_reached
-- Cancel a job past its deadline from its observed state and attempt (re-checked under the lock).
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       finished_at = t.now, updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt AND deadline_at <= t.now
RETURNING *;

-- name: cancel_requested
-- Cancel a job on request from its observed state and attempt.
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       finished_at = t.now, updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt
RETURNING *;
