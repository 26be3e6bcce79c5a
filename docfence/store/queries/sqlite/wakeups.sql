-- Wake-up announcements. SQLite has no NOTIFY: the store sends its announcements to the waiting
-- processes' sockets once the transaction has committed (store/wakeups_sqlite.py), and never runs
-- these two queries. They exist so that both dialects name the same queries.

-- name: announce_work
-- Jobs were queued (not run on SQLite; see above).
SELECT 1;

-- name: announce_job_end
-- These jobs (:ids) reached a terminal state (not run on SQLite; see above).
SELECT 1;
