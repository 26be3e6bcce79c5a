-- Benchmark-only queries (sqlite): never run by the service, the workers or the maintenance passes.
-- Used by docfence/store/bench.py; the same names as postgres/bench.sql.

-- name: bench_fill_finished
-- Benchmarks only: add :n succeeded jobs (a backlog of finished work) in one statement.
WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < :n)
INSERT INTO jobs (id, tenant, kind, document_class, mode, region, policy, state, attempt, max_attempts,
                  lease_ttl_s, retry_backoff_s, deadline_at, run_after, retention_until, created_at,
                  updated_at, finished_at)
SELECT printf('job_done_%09d', i), 'bench', 'watermark', 'default', 'vector', 'local', :policy, 'succeeded',
       1, 3, 30, 1, (julianday('now') - 2440587.5) * 86400.0 + 600, (julianday('now') - 2440587.5) * 86400.0 - 10, (julianday('now') - 2440587.5) * 86400.0 + 86400, (julianday('now') - 2440587.5) * 86400.0 - 10, (julianday('now') - 2440587.5) * 86400.0, (julianday('now') - 2440587.5) * 86400.0
  FROM seq;

-- name: bench_raw_claim
-- Benchmarks only: the practical limit of a claim (no audit, no attempt row).
UPDATE jobs SET state = 'rendering', attempt = attempt + 1, lease_owner = :worker,
       lease_expires_at = (julianday('now') - 2440587.5) * 86400.0 + 30
 WHERE id = (SELECT id FROM jobs INDEXED BY jobs_claim_idx WHERE state = 'queued' ORDER BY run_after, id LIMIT 1)
RETURNING id, attempt;

-- name: bench_raw_commit
-- Benchmarks only: the practical limit of a fenced commit.
UPDATE jobs SET state = 'succeeded', lease_owner = NULL, finished_at = (julianday('now') - 2440587.5) * 86400.0
 WHERE id = :id AND state = 'rendering' AND attempt = :attempt;
