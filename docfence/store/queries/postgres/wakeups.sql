-- Wake-up announcements (store/wakeups_pg.py listens). pg_notify queues them in the transition's own
-- transaction: PostgreSQL delivers them when it commits and drops them when it rolls back.

-- name: announce_work
-- Jobs were queued (submitted, requeued, released, claims resumed): wake idle workers.
SELECT pg_notify('docfence_work', '');

-- name: announce_job_end
-- These jobs (:ids, a JSON array of job ids) reached a terminal state: wake `?wait=` readers.
SELECT count(pg_notify('docfence_job_end', t.id)) FROM jsonb_array_elements_text(:ids::jsonb) AS t(id);
