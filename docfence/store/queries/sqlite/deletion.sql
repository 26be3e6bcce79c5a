-- Deletion and retention: tombstones keep the metadata; the bytes go.

-- name: tombstone_job
-- Mark a terminal job's bytes as deleted (idempotent: the first request id and time stay).
UPDATE jobs
   SET deleted_at = coalesce(deleted_at, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)),
       deletion_request_id = coalesce(deletion_request_id, :request_id),
       audit_seq = audit_seq + 1
 WHERE id = :id AND state IN ('succeeded', 'failed', 'canceled')
RETURNING *;

-- name: tombstone_artifact
-- The artifact row stays as evidence; its bytes are gone.
UPDATE artifacts SET deleted_at = coalesce(deleted_at, :deleted_at) WHERE job_id = :job_id;

-- name: select_retention_due
-- Terminal jobs whose retention has expired and whose bytes are not yet deleted, bounded.
SELECT id FROM jobs
 WHERE deleted_at IS NULL AND state IN ('succeeded', 'failed', 'canceled')
   AND retention_until <= coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
 ORDER BY retention_until, id LIMIT :limit;

