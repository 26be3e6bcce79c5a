-- 003_reports: report templates, report requests, schedules, provider observations
-- (lockstep with sqlite/003_reports.sql). No foreign keys to jobs (see the SQLite file).
CREATE TABLE templates (
    id TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version >= 1),
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    html TEXT NOT NULL,
    css TEXT NOT NULL,
    assets JSONB NOT NULL,
    json_schema JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    created_by TEXT NOT NULL,
    PRIMARY KEY (id, version)
);
CREATE FUNCTION docfence_templates_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'template versions are immutable';
END;
$$;
CREATE TRIGGER templates_immutable BEFORE UPDATE ON templates
    FOR EACH ROW EXECUTE FUNCTION docfence_templates_immutable();

CREATE TABLE report_requests (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    period TEXT NOT NULL,
    template_id TEXT NOT NULL,
    template_version INTEGER NOT NULL,
    template_sha256 TEXT NOT NULL,
    variant TEXT,
    document_class TEXT NOT NULL,
    region TEXT NOT NULL,
    retention_until TIMESTAMPTZ NOT NULL,
    processor TEXT NOT NULL,
    data_sha256 TEXT NOT NULL,
    schedule_id TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    created_by TEXT NOT NULL,
    UNIQUE (tenant, subject, period, template_id, template_version)
);
CREATE INDEX report_requests_tenant_idx ON report_requests (tenant, created_at);
CREATE INDEX jobs_report_request_idx ON jobs (report_request_id) WHERE report_request_id IS NOT NULL;

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
    last_period TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    created_by TEXT NOT NULL,
    UNIQUE (tenant, subject, template_id, template_version)
);

CREATE TABLE provider_observations (
    job_id TEXT PRIMARY KEY,
    attempt INTEGER NOT NULL,
    provider TEXT NOT NULL,
    provider_job_id TEXT,
    status TEXT,
    kind TEXT NOT NULL,
    http_status INTEGER,
    reason TEXT,
    observed_at TIMESTAMPTZ NOT NULL,
    passes INTEGER NOT NULL,
    outcome TEXT
);
