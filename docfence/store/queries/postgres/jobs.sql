-- The SQL of the PostgreSQL store. Same query names as sqlite.sql; `:now` is the injected clock or NULL
-- (then the database clock, now()). Claims use FOR UPDATE SKIP LOCKED.

-- name: store_now
-- The store's clock.
SELECT coalesce(:now::timestamptz, now()) AS now;

-- name: schema_version
-- The newest migration applied to this database (0 before the first).
SELECT coalesce(max(version), 0) AS version FROM schema_migrations;

-- name: find_by_idempotency
-- The job a tenant created with an idempotency key.
SELECT * FROM jobs WHERE tenant = :tenant AND idempotency_key = :idempotency_key;

-- name: get_job
-- One job by id.
SELECT * FROM jobs WHERE id = :id;

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

-- name: end_attempt
-- Close the attempt row with how it ended.
UPDATE attempts SET ended_at = :ended_at, outcome = :outcome, error_code = :error_code
 WHERE job_id = :job_id AND attempt = :attempt AND ended_at IS NULL;

-- name: attempt_validation_kept
-- The failed attempt's validation report (bounded JSON text), written once: a row that already
-- holds one keeps it (evidence is never overwritten).
UPDATE attempts SET validation = :validation
 WHERE job_id = :job_id AND attempt = :attempt AND validation IS NULL;

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
-- Rows are found by primary key (id = ANY) and locked in id order, as artifact_committed does, so the
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

-- name: prev_audit_hashes
-- The hashes of events by chain and number (:links is a JSON array of [chain, chain_seq]); NULL
-- where there is none. A correlated subquery per link: one probe of the (chain, chain_seq) unique
-- index each, never a scan of the whole trail, whatever the statistics say.
SELECT l->>0 AS chain, (l->>1)::int AS chain_seq,
       (SELECT e.hash FROM audit_events AS e WHERE e.chain = l->>0 AND e.chain_seq = (l->>1)::int) AS hash
  FROM jsonb_array_elements(:links::jsonb) AS l;

