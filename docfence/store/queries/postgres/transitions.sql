-- The job transitions of the PostgreSQL store, one query per row name of core/states.py's TRANSITIONS,
-- in the table's order (same names as sqlite/transitions.sql). The store passes the row's answer:
-- :to_state (its target), :from_state (its source) and :attempt_bump; a fenced statement that matches
-- no row changed nothing and the caller raises StaleAttempt. `:now` is the injected clock or NULL
-- (then the database clock, now()). Claims use FOR UPDATE SKIP LOCKED.

-- name: submitted
-- Create queued jobs (one, or a batch submission): :items is a JSON array of insert parameters (policy
-- as JSON text), inserted in array order (the caller sorts them by key so concurrent batches never
-- deadlock); deadline and retention derive from the store's clock. A row whose id or idempotency key
-- is taken is skipped (not returned); the caller resolves it as a replay or a conflict.
INSERT INTO jobs AS j (id, tenant, kind, document_class, mode, region, policy, state, attempt, max_attempts,
                  lease_ttl_s, retry_backoff_s, deadline_at, run_after, retention_until, idempotency_key,
                  request_hash, input_key, input_sha256, input_bytes, parent_job_id, report_request_id,
                  label, filename, sealed_password, data_key_provider, data_key_kek_id, data_key_wrapped,
                  created_at, updated_at, audit_seq)
SELECT i.id, i.tenant, i.kind, i.document_class, i.mode, i.region, i.policy::jsonb, :to_state::text, 0,
       i.max_attempts, i.lease_ttl_s, i.retry_backoff_s, t.now + make_interval(secs => i.deadline_s), t.now,
       t.now + make_interval(secs => i.retention_s), i.idempotency_key,
       i.request_hash, i.input_key, i.input_sha256, i.input_bytes, i.parent_job_id, i.report_request_id,
       i.label, i.filename, i.sealed_password, i.data_key_provider, i.data_key_kek_id, i.data_key_wrapped,
       t.now, t.now, 1
FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t,
     jsonb_to_recordset(:items::jsonb) AS i(id text, tenant text, kind text, document_class text, mode text,
         region text, policy text, max_attempts integer, lease_ttl_s double precision,
         retry_backoff_s double precision, deadline_s double precision, retention_s double precision,
         idempotency_key text, request_hash text, input_key text, input_sha256 text, input_bytes bigint,
         parent_job_id text, report_request_id text, label text, filename text, sealed_password boolean,
         data_key_provider text, data_key_kek_id text, data_key_wrapped text)
WHERE true
ON CONFLICT DO NOTHING
RETURNING *;

-- name: claim_plan
-- Keep this transaction's claim on jobs_claim_idx, read in (run_after, id) order, the one plan that
-- needs no sort. With stale statistics (a sudden backlog) the planner otherwise gathers and sorts
-- every queued row on each claim. The PostgreSQL counterpart of SQLite's INDEXED BY.
SET LOCAL enable_sort = off;

-- name: lease_acquired
-- Lease up to :limit due queued jobs of one kind of work: attempt += :attempt_bump, lease from the
-- store's clock; skips paused modes. :processors NULL is the workers' work (watermark jobs and report
-- jobs rendered here); a JSON array of provider names is the dispatcher's (report jobs those outside
-- renderers render). The source state stays a literal: it is the predicate of jobs_claim_idx.
WITH picked AS (
    SELECT q.id, q.state FROM jobs AS q
     WHERE q.state = 'queued'
       AND q.run_after <= coalesce(:now::timestamptz, now())
       AND q.deadline_at > coalesce(:now::timestamptz, now())
       AND NOT EXISTS (SELECT 1 FROM claim_pauses p WHERE p.scope IN ('all', q.mode))
       AND CASE WHEN :processors::jsonb IS NULL
                THEN q.kind <> 'report' OR coalesce(q.policy -> 'report' ->> 'processor', 'local') = 'local'
                ELSE q.kind = 'report'
                     AND q.policy -> 'report' ->> 'processor' IN (SELECT jsonb_array_elements_text(:processors::jsonb))
           END
     ORDER BY q.run_after, q.id
     LIMIT :limit
       FOR UPDATE SKIP LOCKED)
UPDATE jobs
   SET state = :to_state, attempt = jobs.attempt + :attempt_bump, lease_owner = :worker,
       lease_expires_at = coalesce(:now::timestamptz, now()) + make_interval(secs => jobs.lease_ttl_s),
       heartbeat_at = coalesce(:now::timestamptz, now()), claimed_at = coalesce(:now::timestamptz, now()),
       updated_at = coalesce(:now::timestamptz, now()), audit_seq = jobs.audit_seq + 1
  FROM picked
 WHERE jobs.id = picked.id AND picked.state = 'queued'  -- the locked row's state: a test on jobs.state
                                                         -- would lure the planner onto a state index
RETURNING jobs.*,
          -- the previous event of the job's chain, for the event this transition appends
          (SELECT e.hash FROM audit_events AS e WHERE e.chain = jobs.id AND e.chain_seq = jobs.audit_seq - 1) AS prev_hash;

-- name: artifact_committed
-- Fenced success of several attempts of :worker (:items is a JSON array of [job_id, attempt]). Each
-- row is fenced on its own id, attempt, owner, state and unexpired lease: a stale item is absent
-- from the result. Rows are found, locked and tested as in heartbeat_many.
WITH listed AS (
    SELECT j.id, j.state, j.lease_expires_at FROM jobs AS j
     WHERE j.id = ANY (ARRAY(SELECT l->>0 FROM jsonb_array_elements(:items::jsonb) AS l))
       AND (j.id, j.attempt) IN (SELECT l->>0, (l->>1)::int FROM jsonb_array_elements(:items::jsonb) AS l)
       AND j.lease_owner = :worker
     ORDER BY j.id
       FOR NO KEY UPDATE OF j)
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = NULL, last_error_message = NULL, run_after = t.now,
       finished_at = t.now, updated_at = t.now, audit_seq = jobs.audit_seq + 1
  FROM listed, (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE jobs.id = listed.id AND listed.state = :from_state AND listed.lease_expires_at > t.now
RETURNING jobs.*,
          -- the previous event of the job's chain, for the event this transition appends
          (SELECT e.hash FROM audit_events AS e WHERE e.chain = jobs.id AND e.chain_seq = jobs.audit_seq - 1) AS prev_hash;

-- name: error_reported
-- Fenced end of the current attempt by its worker's error (permanent_error, retryable_error,
-- retries_exhausted): failed, or queued again after :delay_s.
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       run_after = t.now + make_interval(secs => :delay_s),
       finished_at = CASE WHEN :to_state::text IN ('succeeded', 'failed', 'canceled') THEN t.now END,
       updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt
   AND lease_owner = :worker AND lease_expires_at > t.now
RETURNING jobs.*;

-- name: select_expired_leases
-- Candidates of lease_expired: rendering jobs whose lease has expired (never a valid lease), oldest
-- first, bounded.
SELECT id, attempt, max_attempts, lease_expires_at FROM jobs
 WHERE state = 'rendering'
   AND lease_expires_at <= coalesce(:now::timestamptz, now())
 ORDER BY lease_expires_at, id LIMIT :limit
   FOR UPDATE SKIP LOCKED;

-- name: skipped_expired_leases
-- The expired leases select_expired_leases skipped because another session held their row lock: the
-- same predicate read again without locking, minus the candidates it took (:taken, a JSON array of
-- ids), up to the order key of its last candidate when its batch was full (:last_at, :last_id; NULL
-- when it was not: every due row was reachable).
SELECT id, attempt, state, lease_ttl_s, coalesce(:now::timestamptz, now()) AS now FROM jobs
 WHERE state = 'rendering'
   AND lease_expires_at <= coalesce(:now::timestamptz, now())
   AND (:last_id::text IS NULL OR (lease_expires_at, id) < (:last_at::timestamptz, :last_id::text))
   AND id <> ALL (ARRAY(SELECT jsonb_array_elements_text(:taken::jsonb)))
 ORDER BY lease_expires_at, id LIMIT :limit;

-- name: lock_expired_lease
-- Escalation of one expired lease the passes kept skipping: lock that row, WAITING for the session that
-- holds it (bounded by set_lock_timeout), and only while it is still this attempt with an expired
-- lease (re-checked on the row's newest version once the lock is granted).
SELECT id, attempt, max_attempts, lease_expires_at FROM jobs
 WHERE id = :id AND attempt = :attempt AND state = 'rendering'
   AND lease_expires_at <= coalesce(:now::timestamptz, now())
   FOR UPDATE;

-- name: lease_expired
-- Requeue (or fail) one expired lease, re-checking expiry under the write lock. run_after is kept,
-- so a rescued job goes back to its place ahead of newer work instead of the end of the queue.
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       finished_at = CASE WHEN :to_state::text = 'failed' THEN t.now END,
       updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt AND lease_expires_at <= t.now
RETURNING jobs.*;

-- name: lease_released
-- Fenced hand-back of the current attempt's lease (graceful shutdown): queued again at once.
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = NULL, last_error_message = NULL, run_after = t.now,
       finished_at = NULL, updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt
   AND lease_owner = :worker AND lease_expires_at > t.now
RETURNING jobs.*;

-- name: select_past_deadline
-- Candidates of deadline_reached: non-terminal jobs past their deadline, bounded.
SELECT id, attempt, state, deadline_at FROM jobs
 WHERE state IN ('queued', 'rendering')
   AND deadline_at <= coalesce(:now::timestamptz, now())
 ORDER BY deadline_at, id LIMIT :limit
   FOR UPDATE SKIP LOCKED;

-- name: skipped_past_deadline
-- The jobs past their deadline select_past_deadline skipped because another session held their row
-- lock (as skipped_expired_leases, by the order key deadline_at, id).
SELECT id, attempt, state, lease_ttl_s, coalesce(:now::timestamptz, now()) AS now FROM jobs
 WHERE state IN ('queued', 'rendering')
   AND deadline_at <= coalesce(:now::timestamptz, now())
   AND (:last_id::text IS NULL OR (deadline_at, id) < (:last_at::timestamptz, :last_id::text))
   AND id <> ALL (ARRAY(SELECT jsonb_array_elements_text(:taken::jsonb)))
 ORDER BY deadline_at, id LIMIT :limit;

-- name: lock_past_deadline
-- Escalation of one job past its deadline the passes kept skipping: lock that row, waiting for its
-- holder (bounded by set_lock_timeout), while it is still this attempt, not terminal, past its deadline.
SELECT id, attempt, state, deadline_at FROM jobs
 WHERE id = :id AND attempt = :attempt AND state IN ('queued', 'rendering')
   AND deadline_at <= coalesce(:now::timestamptz, now())
   FOR UPDATE;

-- name: deadline_reached
-- Cancel a job past its deadline from its observed state and attempt (re-checked under the lock).
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       finished_at = t.now, updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt AND deadline_at <= t.now
RETURNING jobs.*;

-- name: cancel_requested
-- Cancel a job on request from its observed state and attempt.
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       finished_at = t.now, updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt
RETURNING jobs.*;
