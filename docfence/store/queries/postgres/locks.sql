-- Row locks seen from outside the transaction that holds them (same names as sqlite/locks.sql): the
-- reconciler's escalation waits for one, bounded; `docfence inspect` names the session holding one.

-- name: set_lock_timeout
-- Bound this transaction's lock waits (:lock_timeout, e.g. '1000ms'), instead of the session's default.
SELECT set_config('lock_timeout', :lock_timeout::text, true) AS lock_timeout;

-- name: row_lock_holders
-- The sessions holding job :id's row lock: the transaction named by the row's xmax while it is still
-- running (a finished transaction's xmax names no backend). Durations are the server's real clock
-- (clock_timestamp), as pg_stat_activity's times are, never the injected one. A row share-locked by
-- several transactions at once (a MultiXact xmax) is not resolved.
SELECT a.pid, a.application_name, a.state,
       extract(epoch FROM clock_timestamp() - a.state_change)::float8 AS state_s,
       extract(epoch FROM clock_timestamp() - a.xact_start)::float8 AS xact_s
  FROM jobs AS j
  JOIN pg_stat_activity AS a ON a.backend_xid = j.xmax
 WHERE j.id = :id AND a.pid <> pg_backend_pid()
 ORDER BY a.pid;

-- name: set_statement_timeout
-- Lift this transaction's statement bound (:statement_timeout, e.g. '10min'; '0' for none) for a
-- statement class known to run long (benchmark back-fills), instead of the session's default.
SELECT set_config('statement_timeout', :statement_timeout::text, true) AS statement_timeout;
