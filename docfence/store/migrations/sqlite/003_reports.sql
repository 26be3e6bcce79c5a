-- 003_reports: report templates, report requests, schedules, provider observations
-- (lockstep with postgres/003_reports.sql). Times are REAL unix epoch seconds (UTC).
-- No foreign keys to jobs: a request, its jobs and the archived object are separate records with
-- their own deletion rules (jobs.report_request_id names the request of each job).

-- One immutable template version per row: versions are created, never edited (the trigger refuses).
CREATE TABLE templates (
    id TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version >= 1),
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL,           -- engines.report_bundle.template_hash of the bundle
    html TEXT NOT NULL,
    css TEXT NOT NULL,
    assets TEXT NOT NULL,           -- JSON object: relative name -> base64 bytes
    json_schema TEXT NOT NULL,      -- the JSON Schema (Draft 2020-12) of the template's data
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    PRIMARY KEY (id, version)
);
CREATE TRIGGER templates_immutable BEFORE UPDATE ON templates
BEGIN
    SELECT RAISE(ABORT, 'template versions are immutable');
END;

-- Owner: the caller. Unique on (tenant, subject, period, template@version): creating it twice is one request.
CREATE TABLE report_requests (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    period TEXT NOT NULL,
    template_id TEXT NOT NULL,
    template_version INTEGER NOT NULL,
    template_sha256 TEXT NOT NULL,
    variant TEXT,                   -- NULL (plain PDF), 'pdf/a-3b' or 'pdf/ua-1'
    document_class TEXT NOT NULL,
    region TEXT NOT NULL,
    retention_until REAL NOT NULL,
    processor TEXT NOT NULL,        -- 'local' (docfence's renderer) or a configured provider's name
    data_sha256 TEXT NOT NULL,
    schedule_id TEXT,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    UNIQUE (tenant, subject, period, template_id, template_version)
);
CREATE INDEX report_requests_tenant_idx ON report_requests (tenant, created_at);
CREATE INDEX jobs_report_request_idx ON jobs (report_request_id) WHERE report_request_id IS NOT NULL;

-- "template X@3, monthly on day D": the run on day D of month M creates the request for period M-1.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    template_id TEXT NOT NULL,
    template_version INTEGER NOT NULL,
    day_of_month INTEGER NOT NULL CHECK (day_of_month BETWEEN 1 AND 28),
    catch_up_periods INTEGER NOT NULL CHECK (catch_up_periods >= 0),
    variant TEXT,
    document_class TEXT NOT NULL,
    processor TEXT NOT NULL,
    last_period TEXT,               -- 'YYYY-MM' of the last period whose request exists
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    UNIQUE (tenant, subject, template_id, template_version)
);

-- The last observation of a provider-rendered job, updated on every poll pass (one row per job).
CREATE TABLE provider_observations (
    job_id TEXT PRIMARY KEY,
    attempt INTEGER NOT NULL,
    provider TEXT NOT NULL,
    provider_job_id TEXT,
    status TEXT,                    -- the last status the provider stated (truncated, printable)
    kind TEXT NOT NULL,             -- providers.ObservationKind of the last pass, or submit_failed
    http_status INTEGER,
    reason TEXT,
    observed_at REAL NOT NULL,      -- when the last pass happened
    passes INTEGER NOT NULL,        -- passes of this attempt
    outcome TEXT                    -- NULL while polling; the PollOutcomeCode or error code once terminal
);
