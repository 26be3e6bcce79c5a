-- The SQL of the SQLite store. Same query names as postgres.sql; `:now` is the injected clock or NULL
-- (then the database clock). Times are REAL unix epoch seconds.

-- name: store_now
-- The store's clock.
SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now;

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
   SET lease_expires_at = t.now + lease_ttl_s, heartbeat_at = t.now
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
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
VALUES (:job_id, :attempt, :storage_key, :sha256, :bytes, :pages, :validation, :created_at);

-- name: get_artifact
-- The committed artifact of a job.
SELECT * FROM artifacts WHERE job_id = :job_id;

-- name: bump_job_audit
-- Lock a job's audit chain for a non-transition event (download, deletion).
UPDATE jobs SET audit_seq = audit_seq + 1,
       updated_at = updated_at
 WHERE id = :id
RETURNING id, attempt, state, audit_seq,
          coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now;

-- name: lock_chain
-- Head of a non-job audit chain (SQLite: the write transaction already serialises writers).
SELECT seq, hash, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now
  FROM audit_chains WHERE chain = :chain;

-- name: upsert_chain
-- Advance a non-job chain head.
INSERT INTO audit_chains (chain, seq, hash) VALUES (:chain, :seq, :hash)
ON CONFLICT (chain) DO UPDATE SET seq = excluded.seq, hash = excluded.hash;

-- name: insert_audit
-- Append one audit event.
INSERT INTO audit_events (chain, chain_seq, job_id, attempt, actor, action, from_state, to_state, reason,
                          at, details, prev_hash, hash)
VALUES (:chain, :chain_seq, :job_id, :attempt, :actor, :action, :from_state, :to_state, :reason,
        :at, :details, :prev_hash, :hash);

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
-- Times given here went through Python's microsecond datetimes, so they are compared with created_at
-- rounded to the microsecond: a cursor or bound taken from a row matches that row exactly.
SELECT * FROM jobs
 WHERE (:state IS NULL OR state = :state) AND (:tenant IS NULL OR tenant = :tenant)
   AND (:mode IS NULL OR mode = :mode) AND (:document_class IS NULL OR document_class = :document_class)
   AND (:label IS NULL OR label = :label) AND (:filename IS NULL OR filename = :filename)
   AND (:created_before IS NULL OR round(created_at, 6) < round(:created_before, 6))
   AND (:created_after IS NULL OR round(created_at, 6) >= round(:created_after, 6))
   AND (:after_at IS NULL OR round(created_at, 6) < round(:after_at, 6)
        OR (round(created_at, 6) = round(:after_at, 6) AND id < :after_id))
 ORDER BY created_at DESC, id DESC LIMIT :limit;

-- name: insert_pause
-- Pause claims for 'all' or one mode.
INSERT INTO claim_pauses (scope, paused_at, actor, reason)
VALUES (:scope, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0), :actor, :reason)
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
 WHERE state = 'rendering' AND (:mode IS NULL OR mode = :mode)
   AND lease_expires_at > coalesce(:now, (julianday('now') - 2440587.5) * 86400.0);

-- name: set_class_mode
-- Which mode new jobs of a document class get.
INSERT INTO class_modes (document_class, mode, updated_at, actor)
VALUES (:document_class, :mode, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0), :actor)
ON CONFLICT (document_class) DO UPDATE SET mode = excluded.mode, updated_at = excluded.updated_at,
                                           actor = excluded.actor;

-- name: list_class_modes
-- Mode overrides per document class.
SELECT * FROM class_modes ORDER BY document_class;

-- name: truncate_all
-- Tests only: empty every table.
DELETE FROM webhook_attempts; DELETE FROM webhook_deliveries; DELETE FROM webhook_events;
DELETE FROM webhook_endpoints;
DELETE FROM audit_events; DELETE FROM audit_chains; DELETE FROM artifacts; DELETE FROM attempts;
DELETE FROM claim_pauses; DELETE FROM class_modes; DELETE FROM jobs;
DELETE FROM provider_observations; DELETE FROM report_requests; DELETE FROM schedules;
DELETE FROM templates; DELETE FROM template_owners;

-- name: insert_api_key
-- Store a new key's hash (never the key).
INSERT INTO api_keys (id, tenant, name, scopes, key_hash, created_at)
VALUES (:id, :tenant, :key_name, :scopes, :key_hash, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0))
RETURNING *;

-- name: get_api_key
-- One key record by id.
SELECT * FROM api_keys WHERE id = :id;

-- name: revoke_api_key
-- Revoke a key (idempotent: the first revocation time stays).
UPDATE api_keys SET revoked_at = coalesce(revoked_at, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)) WHERE id = :id
RETURNING *;

-- name: list_api_keys
-- Keys, optionally of one tenant.
SELECT * FROM api_keys WHERE (:tenant IS NULL OR tenant = :tenant) ORDER BY created_at, id;

-- name: heartbeat_many
-- Extend every listed lease (:leases is a JSON array of [job_id, attempt]) still held by :worker,
-- each found through the primary key (see artifact_committed).
UPDATE jobs
   SET lease_expires_at = t.now + lease_ttl_s, heartbeat_at = t.now
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t,
       (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt
          FROM json_each(:leases)) AS v
 WHERE jobs.id = v.id AND jobs.attempt = v.attempt
   AND +jobs.state = 'rendering' AND jobs.lease_owner = :worker AND jobs.lease_expires_at > t.now
RETURNING jobs.id, jobs.attempt, jobs.lease_expires_at;

-- name: prev_audit_hashes
-- The hashes of events by chain and number (:links is a JSON array of [chain, chain_seq]); NULL
-- where there is none. One probe of the (chain, chain_seq) unique index per link.
SELECT json_extract(l.value, '$[0]') AS chain, json_extract(l.value, '$[1]') AS chain_seq,
       (SELECT e.hash FROM audit_events AS e
         WHERE e.chain = json_extract(l.value, '$[0]') AND e.chain_seq = json_extract(l.value, '$[1]')) AS hash
  FROM json_each(:links) AS l;

