-- 007_webhooks: signed webhooks (lockstep with postgres/007_webhooks.sql). Endpoints per tenant, an
-- outbox of events written in the transaction of each terminal transition, one delivery per event and
-- subscribed endpoint, and one row per delivery attempt (evidence, never overwritten by a later attempt).
CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    url TEXT NOT NULL,
    events TEXT NOT NULL,              -- ",job.succeeded,job.failed," (commas on both ends: LIKE matches)
    secret TEXT NOT NULL,              -- whsec_... (needed to sign; shown to the caller once)
    previous_secret TEXT,              -- still signs alongside the new one until secret_grace_until
    secret_grace_until REAL,
    description TEXT,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    disabled_at REAL
);
CREATE INDEX webhook_endpoints_tenant_idx ON webhook_endpoints (tenant) WHERE disabled_at IS NULL;

CREATE TABLE webhook_events (
    id TEXT PRIMARY KEY,               -- the `webhook-id` header: the same on every attempt
    tenant TEXT NOT NULL,
    type TEXT NOT NULL,                -- job.succeeded | job.failed | job.canceled | report_request.*
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    report_request_id TEXT,
    payload TEXT NOT NULL,             -- JSON: ids, state, error code, sha256, pages, links; no content
    created_at REAL NOT NULL
);
CREATE INDEX webhook_events_job_idx ON webhook_events (job_id);

CREATE TABLE webhook_deliveries (
    event_id TEXT NOT NULL REFERENCES webhook_events(id),
    endpoint_id TEXT NOT NULL REFERENCES webhook_endpoints(id),
    state TEXT NOT NULL CHECK (state IN ('pending','delivering','delivered','failed')),
    attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),   -- fencing token of the dispatcher
    run_after REAL NOT NULL,           -- pending: next attempt; delivering: when the lease expires
    lease_owner TEXT,
    last_status INTEGER,
    failure_reason TEXT,
    created_at REAL NOT NULL,
    finished_at REAL,
    PRIMARY KEY (event_id, endpoint_id)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (run_after)
    WHERE state IN ('pending','delivering');
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id)
    WHERE state IN ('pending','delivering');

CREATE TABLE webhook_attempts (
    event_id TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    dispatcher TEXT NOT NULL,
    claimed_at REAL NOT NULL,
    ended_at REAL,
    outcome TEXT,                      -- delivered | retry | failed | abandoned (lease lost mid-attempt)
    status_code INTEGER,
    latency_ms REAL,
    error TEXT,
    body_prefix TEXT,                  -- at most 256 bytes of the receiver's answer
    PRIMARY KEY (event_id, endpoint_id, attempt)
);
