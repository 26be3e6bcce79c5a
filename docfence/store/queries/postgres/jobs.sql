-- The SQL of the PostgreSQL store. Same query names as sqlite.sql; `:now` is the injected clock or NULL
-- (then the database clock, now()). Claims use FOR UPDATE SKIP LOCKED.

-- name: store_now
-- The store's clock.
SELECT coalesce(:now::timestamptz, now()) AS now;

-- name: insert_job
-- Create a queued job with its frozen policy; deadline and retention derive from the store's clock.
INSERT INTO jobs AS j (id, tenant, kind, document_class, mode, region, policy, state, attempt, max_attempts,
                  lease_ttl_s, retry_backoff_s, deadline_at, run_after, retention_until, idempotency_key,
                  request_hash, input_key, input_sha256, input_bytes, parent_job_id, report_request_id,
                  label, filename, sealed_password, created_at, updated_at, audit_seq)
SELECT :id, :tenant, :kind, :document_class, :mode, :region, :policy::jsonb, 'queued', 0, :max_attempts,
       :lease_ttl_s, :retry_backoff_s, t.now + make_interval(secs => :deadline_s), t.now, t.now + make_interval(secs => :retention_s), :idempotency_key,
       :request_hash, :input_key, :input_sha256, :input_bytes, :parent_job_id, :report_request_id,
       :label, :filename, :sealed_password, t.now, t.now, 1
FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
WHERE true
ON CONFLICT DO NOTHING
RETURNING *;

-- name: find_by_idempotency
-- The job a tenant created with an idempotency key.
SELECT * FROM jobs WHERE tenant = :tenant AND idempotency_key = :idempotency_key;

-- name: get_job
-- One job by id.
SELECT * FROM jobs WHERE id = :id;

-- name: claim_plan
-- Keep this transaction's claim on jobs_claim_idx, read in (run_after, id) order, the one plan that
-- needs no sort. With stale statistics (a sudden backlog) the planner otherwise gathers and sorts
-- every queued row on each claim. The PostgreSQL counterpart of SQLite's INDEXED BY.
SET LOCAL enable_sort = off;

-- name: claim_jobs
-- Lease up to :limit due queued jobs: attempt += 1, lease from the store's clock. Skips paused modes.
WITH picked AS (
    SELECT q.id, q.state FROM jobs AS q
     WHERE q.state = 'queued'
       AND q.run_after <= coalesce(:now::timestamptz, now())
       AND q.deadline_at > coalesce(:now::timestamptz, now())
       AND NOT EXISTS (SELECT 1 FROM claim_pauses p WHERE p.scope IN ('all', q.mode))
       -- report jobs rendered by an outside provider belong to the dispatcher, not to workers
       AND (q.kind <> 'report' OR coalesce(q.policy -> 'report' ->> 'processor', 'local') = 'local')
     ORDER BY q.run_after, q.id
     LIMIT :limit
       FOR UPDATE SKIP LOCKED)
UPDATE jobs
   SET state = 'rendering', attempt = jobs.attempt + 1, lease_owner = :worker,
       lease_expires_at = coalesce(:now::timestamptz, now()) + make_interval(secs => jobs.lease_ttl_s),
       heartbeat_at = coalesce(:now::timestamptz, now()), claimed_at = coalesce(:now::timestamptz, now()),
       updated_at = coalesce(:now::timestamptz, now()), audit_seq = jobs.audit_seq + 1
  FROM picked
 WHERE jobs.id = picked.id AND picked.state = 'queued'  -- the locked row's state: a test on jobs.state
                                                         -- would lure the planner onto a state index
RETURNING jobs.*,
          -- the previous event of the job's chain, for the event this transition appends
          (SELECT e.hash FROM audit_events AS e WHERE e.chain = jobs.id AND e.chain_seq = jobs.audit_seq - 1) AS prev_hash;

-- name: insert_attempt
-- One row per attempt; never overwritten.
INSERT INTO attempts (job_id, attempt, worker, claimed_at) VALUES (:job_id, :attempt, :worker, :claimed_at);

-- name: heartbeat
-- Extend a lease only while id, attempt, state and owner match and the lease has not expired.
UPDATE jobs
   SET lease_expires_at = t.now + make_interval(secs => lease_ttl_s), heartbeat_at = t.now
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE id = :id AND attempt = :attempt AND state = 'rendering' AND lease_owner = :worker
   AND lease_expires_at > t.now
RETURNING lease_expires_at;

-- name: fence_finish
-- Fenced move of the current attempt to a terminal or queued state (commit, fail, retry, release).
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
-- Rendering jobs whose lease has expired (never a valid lease), oldest first, bounded.
SELECT id, attempt, max_attempts FROM jobs
 WHERE state = 'rendering'
   AND lease_expires_at <= coalesce(:now::timestamptz, now())
 ORDER BY lease_expires_at, id LIMIT :limit
   FOR UPDATE SKIP LOCKED;

-- name: fence_expired
-- Requeue (or fail) one expired lease, re-checking expiry under the write lock. run_after is kept,
-- so a rescued job goes back to its place ahead of newer work instead of the end of the queue.
UPDATE jobs
   SET state = :to_state, lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       finished_at = CASE WHEN :to_state::text = 'failed' THEN t.now END,
       updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE id = :id AND state = 'rendering' AND attempt = :attempt AND lease_expires_at <= t.now
RETURNING jobs.*;

-- name: select_past_deadline
-- Non-terminal jobs past their deadline, bounded.
SELECT id, attempt, state FROM jobs
 WHERE state IN ('queued', 'rendering')
   AND deadline_at <= coalesce(:now::timestamptz, now())
 ORDER BY deadline_at, id LIMIT :limit
   FOR UPDATE SKIP LOCKED;

-- name: fence_cancel
-- Cancel a job from its observed state and attempt (deadline or request).
UPDATE jobs
   SET state = 'canceled', lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = :error_code, last_error_message = :error_message,
       finished_at = t.now, updated_at = t.now, audit_seq = audit_seq + 1
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE id = :id AND state = :from_state AND attempt = :attempt
   AND (NOT :require_deadline OR deadline_at <= t.now)
RETURNING jobs.*;

-- name: end_attempt
-- Close the attempt row with how it ended.
UPDATE attempts SET ended_at = :ended_at, outcome = :outcome, error_code = :error_code
 WHERE job_id = :job_id AND attempt = :attempt AND ended_at IS NULL;

-- name: insert_artifact
-- The artifact of the committing attempt; visible only through the succeeded job naming it.
INSERT INTO artifacts (job_id, attempt, storage_key, sha256, bytes, pages, validation, created_at)
VALUES (:job_id, :attempt, :storage_key, :sha256, :bytes, :pages, :validation::jsonb, :created_at);

-- name: get_artifact
-- The committed artifact of a job.
SELECT * FROM artifacts WHERE job_id = :job_id;

-- name: bump_job_audit
-- Lock a job's audit chain for a non-transition event (download, deletion).
UPDATE jobs SET audit_seq = audit_seq + 1,
       updated_at = updated_at
 WHERE id = :id
RETURNING id, attempt, state, audit_seq,
          coalesce(:now::timestamptz, now()) AS now;

-- name: lock_chain
-- Head of a non-job audit chain, locked until commit (the advisory lock covers a chain not yet created).
SELECT seq, hash, coalesce(:now::timestamptz, now()) AS now
  FROM (SELECT pg_advisory_xact_lock(hashtext('docfence_audit:' || :chain))) AS l
  LEFT JOIN audit_chains ON chain = :chain;

-- name: upsert_chain
-- Advance a non-job chain head.
INSERT INTO audit_chains (chain, seq, hash) VALUES (:chain, :seq, :hash)
ON CONFLICT (chain) DO UPDATE SET seq = excluded.seq, hash = excluded.hash;

-- name: insert_audit
-- Append one audit event.
INSERT INTO audit_events (chain, chain_seq, job_id, attempt, actor, action, from_state, to_state, reason,
                          at, details, prev_hash, hash)
VALUES (:chain, :chain_seq, :job_id, :attempt, :actor, :action, :from_state, :to_state, :reason,
        :at, :details::jsonb, :prev_hash, :hash);

-- name: list_audit_for_job
-- A job's audit events in order (a job's events are its own chain).
SELECT * FROM audit_events WHERE chain = :job_id ORDER BY chain_seq;

-- name: list_audit
-- Audit events after a sequence number, in order (export and verification).
SELECT * FROM audit_events WHERE seq > :after_seq ORDER BY seq LIMIT :limit;

-- name: list_chain_heads
-- Every chain head: jobs' and the non-job chains' (verification).
SELECT j.id AS chain, j.audit_seq AS seq, coalesce(e.hash, '') AS hash
  FROM jobs AS j LEFT JOIN audit_events AS e ON e.chain = j.id AND e.chain_seq = j.audit_seq
 WHERE j.audit_seq > 0
UNION ALL SELECT chain, seq, hash FROM audit_chains;

-- name: list_attempts
-- A job's attempts in order.
SELECT * FROM attempts WHERE job_id = :job_id ORDER BY attempt;

-- name: count_by_state
-- Queue depth by state.
SELECT state, count(*) AS n FROM jobs GROUP BY state;

-- name: list_jobs
-- Jobs filtered by optional state/tenant/mode/class/label/filename and creation range, newest first, bounded.
SELECT * FROM jobs
 WHERE (:state::text IS NULL OR state = :state) AND (:tenant::text IS NULL OR tenant = :tenant)
   AND (:mode::text IS NULL OR mode = :mode) AND (:document_class::text IS NULL OR document_class = :document_class)
   AND (:label::text IS NULL OR label = :label) AND (:filename::text IS NULL OR filename = :filename)
   AND (:created_before::timestamptz IS NULL OR created_at < :created_before)
   AND (:created_after::timestamptz IS NULL OR created_at >= :created_after)
   AND (:after_at::timestamptz IS NULL OR created_at < :after_at
        OR (created_at = :after_at AND id < :after_id::text))
 ORDER BY created_at DESC, id DESC LIMIT :limit;

-- name: insert_pause
-- Pause claims for 'all' or one mode.
INSERT INTO claim_pauses (scope, paused_at, actor, reason)
VALUES (:scope, coalesce(:now::timestamptz, now()), :actor, :reason)
ON CONFLICT (scope) DO NOTHING;

-- name: delete_pause
-- Resume claims for a scope.
DELETE FROM claim_pauses WHERE scope = :scope;

-- name: list_pauses
-- Current claim pauses.
SELECT * FROM claim_pauses ORDER BY scope;

-- name: count_valid_leases
-- How many leases are still valid (drain waits for zero), optionally for one mode.
SELECT count(*) AS n FROM jobs
 WHERE state = 'rendering' AND (:mode::text IS NULL OR mode = :mode)
   AND lease_expires_at > coalesce(:now::timestamptz, now());

-- name: set_class_mode
-- Which mode new jobs of a document class get.
INSERT INTO class_modes (document_class, mode, updated_at, actor)
VALUES (:document_class, :mode, coalesce(:now::timestamptz, now()), :actor)
ON CONFLICT (document_class) DO UPDATE SET mode = excluded.mode, updated_at = excluded.updated_at,
                                           actor = excluded.actor;

-- name: list_class_modes
-- Mode overrides per document class.
SELECT * FROM class_modes ORDER BY document_class;

-- name: truncate_all
-- Tests only: empty every table.
TRUNCATE audit_events, audit_chains, artifacts, attempts, claim_pauses, class_modes, jobs,
         provider_observations, report_requests, schedules, templates, template_owners,
         webhook_attempts, webhook_deliveries, webhook_events, webhook_endpoints;

-- name: insert_api_key
-- Store a new key's hash (never the key).
INSERT INTO api_keys (id, tenant, name, scopes, key_hash, created_at)
VALUES (:id, :tenant, :key_name, :scopes, :key_hash, coalesce(:now::timestamptz, now()))
RETURNING *;

-- name: get_api_key
-- One key record by id.
SELECT * FROM api_keys WHERE id = :id;

-- name: revoke_api_key
-- Revoke a key (idempotent: the first revocation time stays).
UPDATE api_keys SET revoked_at = coalesce(revoked_at, coalesce(:now::timestamptz, now())) WHERE id = :id
RETURNING *;

-- name: list_api_keys
-- Keys, optionally of one tenant.
SELECT * FROM api_keys WHERE (:tenant::text IS NULL OR tenant = :tenant) ORDER BY created_at, id;

-- name: heartbeat_many
-- Extend every listed lease (:leases is a JSON array of [job_id, attempt]) still held by :worker.
-- Rows are found by primary key (id = ANY) and locked in id order, as fence_commit_many does, so the
-- two never deadlock each other. State and expiry are tested on the locked values (`listed`), never
-- on `jobs` directly, where they would lure the planner onto a state index and a scan of every
-- leased job.
WITH listed AS (
    SELECT j.id, j.state, j.lease_expires_at FROM jobs AS j
     WHERE j.id = ANY (ARRAY(SELECT l->>0 FROM jsonb_array_elements(:leases::jsonb) AS l))
       AND (j.id, j.attempt) IN (SELECT l->>0, (l->>1)::int FROM jsonb_array_elements(:leases::jsonb) AS l)
       AND j.lease_owner = :worker
     ORDER BY j.id
       FOR NO KEY UPDATE OF j)
UPDATE jobs
   SET lease_expires_at = coalesce(:now::timestamptz, now()) + make_interval(secs => lease_ttl_s),
       heartbeat_at = coalesce(:now::timestamptz, now())
  FROM listed
 WHERE jobs.id = listed.id AND listed.state = 'rendering'
   AND listed.lease_expires_at > coalesce(:now::timestamptz, now())
RETURNING jobs.id, jobs.attempt, jobs.lease_expires_at;

-- name: fence_commit_many
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
   SET state = 'succeeded', lease_owner = NULL, lease_expires_at = NULL,
       last_error_code = NULL, last_error_message = NULL, run_after = t.now,
       finished_at = t.now, updated_at = t.now, audit_seq = jobs.audit_seq + 1
  FROM listed, (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
 WHERE jobs.id = listed.id AND listed.state = 'rendering' AND listed.lease_expires_at > t.now
RETURNING jobs.*,
          -- the previous event of the job's chain, for the event this transition appends
          (SELECT e.hash FROM audit_events AS e WHERE e.chain = jobs.id AND e.chain_seq = jobs.audit_seq - 1) AS prev_hash;

-- name: prev_audit_hashes
-- The hashes of events by chain and number (:links is a JSON array of [chain, chain_seq]); NULL
-- where there is none. A correlated subquery per link: one probe of the (chain, chain_seq) unique
-- index each, never a scan of the whole trail, whatever the statistics say.
SELECT l->>0 AS chain, (l->>1)::int AS chain_seq,
       (SELECT e.hash FROM audit_events AS e WHERE e.chain = l->>0 AND e.chain_seq = (l->>1)::int) AS hash
  FROM jsonb_array_elements(:links::jsonb) AS l;

-- name: insert_jobs_many
-- Create many queued jobs in one statement (a batch submission): :items is a JSON array of the
-- insert_job parameters (policy as JSON text), inserted in array order (the caller sorts them by key so
-- concurrent batches never deadlock). A row whose idempotency key is taken is skipped (not returned);
-- the caller resolves it like insert_job's conflict.
INSERT INTO jobs AS j (id, tenant, kind, document_class, mode, region, policy, state, attempt, max_attempts,
                  lease_ttl_s, retry_backoff_s, deadline_at, run_after, retention_until, idempotency_key,
                  request_hash, input_key, input_sha256, input_bytes, parent_job_id, report_request_id,
                  label, filename, sealed_password, created_at, updated_at, audit_seq)
SELECT i.id, i.tenant, i.kind, i.document_class, i.mode, i.region, i.policy::jsonb, 'queued', 0, i.max_attempts,
       i.lease_ttl_s, i.retry_backoff_s, t.now + make_interval(secs => i.deadline_s), t.now,
       t.now + make_interval(secs => i.retention_s), i.idempotency_key,
       i.request_hash, i.input_key, i.input_sha256, i.input_bytes, i.parent_job_id, i.report_request_id,
       i.label, i.filename, i.sealed_password, t.now, t.now, 1
FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t,
     jsonb_to_recordset(:items::jsonb) AS i(id text, tenant text, kind text, document_class text, mode text,
         region text, policy text, max_attempts integer, lease_ttl_s double precision,
         retry_backoff_s double precision, deadline_s double precision, retention_s double precision,
         idempotency_key text, request_hash text, input_key text, input_sha256 text, input_bytes bigint,
         parent_job_id text, report_request_id text, label text, filename text, sealed_password boolean)
WHERE true
ON CONFLICT DO NOTHING
RETURNING *;
