-- Row locks seen from outside the transaction that holds them (same names as postgres/locks.sql).
-- SQLite has no row locks and no sessions: one writer holds the database's write lock, and every
-- other writer waits for it at most its busy timeout (store/sqlite.py, BUSY_TIMEOUT_S).

-- name: set_lock_timeout
-- No per-transaction lock bound in SQLite: the busy timeout of the connection applies (this reads back
-- the requested value and changes nothing).
SELECT :lock_timeout AS lock_timeout;

-- name: row_lock_holders
-- No session ever holds one job's row in SQLite: no rows.
SELECT NULL AS pid, NULL AS application_name, NULL AS state, NULL AS state_s, NULL AS xact_s
 WHERE :id IS NULL AND 0;

-- name: set_statement_timeout
-- No statement timeout in SQLite (reads back the requested value and changes nothing).
SELECT :statement_timeout AS statement_timeout;

-- name: terminate_due_holders
-- No sessions to end in SQLite (a writer waits at most its busy timeout): no rows.
SELECT NULL AS pid, NULL AS application_name, NULL AS state, NULL AS state_s, NULL AS xact_s,
       NULL AS terminated
 WHERE :id IS NULL AND :attempt IS NULL AND :due IS NULL AND :now IS NULL AND :own_prefix IS NULL
   AND :wait_ms IS NULL AND 0;
