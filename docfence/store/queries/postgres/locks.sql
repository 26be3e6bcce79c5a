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

-- name: terminate_due_holders
-- Escalation past waiting: the sessions holding job :id's row lock while it is still :attempt and due
-- for the pass :due (store clock), as row_lock_holders finds them. 'lease_expired': still rendering with
-- an expired lease; 'deadline_reached': not terminal and past its deadline, whatever its lease (the
-- deadline ends the attempt anyway); any other :due matches nothing. Those whose application_name
-- starts with :own_prefix (docfence's own: their work is fenced out already) are ended with
-- pg_terminate_backend, which waits up to :wait_ms for the backend to exit (its transaction rolls back,
-- its locks go); any other client's session is only answered (terminated false), never ended.
SELECT a.pid, a.application_name, a.state,
       extract(epoch FROM clock_timestamp() - a.state_change)::float8 AS state_s,
       extract(epoch FROM clock_timestamp() - a.xact_start)::float8 AS xact_s,
       CASE WHEN starts_with(coalesce(a.application_name, ''), :own_prefix::text)
            THEN pg_terminate_backend(a.pid, :wait_ms::bigint) ELSE false END AS terminated
  FROM jobs AS j
  JOIN pg_stat_activity AS a ON a.backend_xid = j.xmax
 WHERE j.id = :id AND j.attempt = :attempt
   AND CASE :due::text
         WHEN 'lease_expired' THEN j.state = 'rendering'
                                   AND j.lease_expires_at <= coalesce(:now::timestamptz, now())
         WHEN 'deadline_reached' THEN j.state IN ('queued', 'rendering')
                                      AND j.deadline_at <= coalesce(:now::timestamptz, now())
         ELSE false
       END
   AND a.pid <> pg_backend_pid()
 ORDER BY a.pid;
