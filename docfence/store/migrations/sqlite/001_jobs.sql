-- 001_jobs: jobs, attempts, artifacts, audit trail, claim pauses (lockstep with postgres/001_jobs.sql)
-- Times are REAL unix epoch seconds (UTC); the store's clock is julianday('now').
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    kind TEXT NOT NULL,
    document_class TEXT NOT NULL,
    mode TEXT NOT NULL,
    region TEXT NOT NULL,
    policy TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued','rendering','succeeded','failed','canceled')),
    attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts INTEGER NOT NULL,
    lease_ttl_s REAL NOT NULL,
    retry_backoff_s REAL NOT NULL,
    lease_owner TEXT,
    lease_expires_at REAL,
    heartbeat_at REAL,
    deadline_at REAL NOT NULL,
    run_after REAL NOT NULL,
    retention_until REAL NOT NULL,
    last_error_code TEXT,
    last_error_message TEXT,
    idempotency_key TEXT,
    request_hash TEXT,
    input_key TEXT,
    input_sha256 TEXT,
    input_bytes INTEGER,
    parent_job_id TEXT REFERENCES jobs(id),
    report_request_id TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    claimed_at REAL,
    finished_at REAL,
    deleted_at REAL,
    deletion_request_id TEXT,
    audit_seq INTEGER NOT NULL DEFAULT 0  -- number of the job's last audit event (its chain head)
);
CREATE UNIQUE INDEX jobs_idempotency_idx ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- The claim reads only this partial index; the claim query names it with INDEXED BY so the planner
-- cannot abandon it for a scan after ANALYZE on a table full of finished jobs.
CREATE INDEX jobs_claim_idx ON jobs (run_after, id) WHERE state = 'queued';
CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at) WHERE state = 'rendering';
CREATE INDEX jobs_deadline_idx ON jobs (deadline_at) WHERE state IN ('queued', 'rendering');
CREATE INDEX jobs_retention_idx ON jobs (retention_until) WHERE deleted_at IS NULL;
CREATE INDEX jobs_tenant_created_idx ON jobs (tenant, created_at);
CREATE INDEX jobs_state_created_idx ON jobs (state, created_at);

CREATE TABLE attempts (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    attempt INTEGER NOT NULL,
    worker TEXT NOT NULL,
    claimed_at REAL NOT NULL,
    ended_at REAL,
    outcome TEXT,
    error_code TEXT,
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE artifacts (
    job_id TEXT PRIMARY KEY REFERENCES jobs(id),
    attempt INTEGER NOT NULL,
    storage_key TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    pages INTEGER NOT NULL,
    validation TEXT NOT NULL,
    created_at REAL NOT NULL,
    deleted_at REAL
);

-- Append-only. Each chain (one per job, plus the global chain '') is hash-linked: hash commits to
-- prev_hash and the event's fields, so an edited, removed or reordered event is detectable.
CREATE TABLE audit_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    chain TEXT NOT NULL,
    chain_seq INTEGER NOT NULL,
    job_id TEXT,
    attempt INTEGER,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    from_state TEXT,
    to_state TEXT,
    reason TEXT,
    at REAL NOT NULL,
    details TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    UNIQUE (chain, chain_seq)
);
CREATE INDEX audit_job_idx ON audit_events (job_id, seq);

CREATE TABLE audit_chains (
    chain TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);

CREATE TABLE claim_pauses (
    scope TEXT PRIMARY KEY,          -- 'all' or a mode name
    paused_at REAL NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT
);

CREATE TABLE class_modes (
    document_class TEXT PRIMARY KEY, -- which mode NEW jobs of a class get; existing jobs keep theirs
    mode TEXT NOT NULL,
    updated_at REAL NOT NULL,
    actor TEXT NOT NULL
);
