-- Benchmark-only queries (postgres): never run by the service, the workers or the maintenance passes.
-- Used by docfence/store/bench.py; the same names as sqlite/bench.sql.

-- name: bench_fill_finished
-- Benchmarks only: add :n succeeded jobs (a backlog of finished work) in one statement.
INSERT INTO jobs (id, tenant, kind, document_class, mode, region, policy, state, attempt, max_attempts,
                  lease_ttl_s, retry_backoff_s, deadline_at, run_after, retention_until, created_at,
                  updated_at, finished_at)
SELECT 'job_done_' || lpad(i::text, 9, '0'), 'bench', 'watermark', 'default', 'vector', 'local',
       :policy::jsonb, 'succeeded', 1, 3, 30, 1, now() + interval '600 s', now() - interval '10 s',
       now() + interval '1 day', now() - interval '10 s', now(), now()
  FROM generate_series(1, :n) AS i;

-- name: bench_raw_claim
-- Benchmarks only: the practical limit of a claim (no audit, no attempt row).
UPDATE jobs SET state = 'rendering', attempt = attempt + 1, lease_owner = :worker,
       lease_expires_at = now() + interval '30 s'
 WHERE id = (SELECT id FROM jobs WHERE state = 'queued' ORDER BY run_after, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, attempt;

-- name: bench_raw_commit
-- Benchmarks only: the practical limit of a fenced commit.
UPDATE jobs SET state = 'succeeded', lease_owner = NULL, finished_at = now()
 WHERE id = :id AND state = 'rendering' AND attempt = :attempt;
