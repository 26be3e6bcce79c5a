-- 004_fewer_index_writes: fewer index writes per job (lockstep with postgres/004_fewer_index_writes.sql).
-- Every event of a job is on the job's own chain (chain = job id), so list_audit_for_job reads the
-- (chain, chain_seq) unique index; this index only doubled the index writes of every event.
DROP INDEX audit_job_idx;
-- A heartbeat changes only lease_expires_at and heartbeat_at; with no index on either it rewrites
-- the row and no index. The lease rescuer reads the rendering jobs (as many as the workers hold)
-- through this index and filters on expiry.
DROP INDEX jobs_lease_idx;
CREATE INDEX jobs_rendering_idx ON jobs (claimed_at) WHERE state = 'rendering';
