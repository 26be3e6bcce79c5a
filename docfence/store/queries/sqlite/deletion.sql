-- Deletion and retention: tombstones keep the metadata; the bytes go.

-- name: tombstone_job
-- Mark a terminal job's bytes as deleted (idempotent: the first request id and time stay), and destroy
-- its wrapped data key in the same UPDATE: every copy of its objects, backups included, is unreadable.
UPDATE jobs
   SET deleted_at = coalesce(deleted_at, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)),
       data_key_destroyed_at = CASE WHEN data_key_wrapped IS NULL THEN data_key_destroyed_at
                                    ELSE coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) END,
       data_key_wrapped = NULL,
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

