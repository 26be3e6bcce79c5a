-- 006_report_revisions: a report request can be superseded by a corrected one for the same subject,
-- period and template@version (lockstep with postgres/006_report_revisions.sql). The old request and
-- its failed jobs stay as evidence; `supersedes`/`superseded_by` link the two, `revision` counts them.
-- SQLite cannot change a table's UNIQUE constraint in place: the table is rebuilt with the same rows.
CREATE TABLE report_requests_new (
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
    retention_until REAL NOT NULL,
    processor TEXT NOT NULL,
    data_sha256 TEXT NOT NULL,
    schedule_id TEXT,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    revision INTEGER NOT NULL DEFAULT 1 CHECK (revision >= 1),
    supersedes TEXT,                -- the request this one corrects (NULL for revision 1)
    superseded_by TEXT,             -- the request that corrected this one (NULL while current)
    superseded_at REAL,
    watermark TEXT,                 -- JSON object of the caller's watermark fields, or NULL (the class's)
    UNIQUE (tenant, subject, period, template_id, template_version, revision)
);
INSERT INTO report_requests_new (id, tenant, subject, period, template_id, template_version, template_sha256,
                                 variant, document_class, region, retention_until, processor, data_sha256,
                                 schedule_id, created_at, created_by)
SELECT id, tenant, subject, period, template_id, template_version, template_sha256, variant, document_class,
       region, retention_until, processor, data_sha256, schedule_id, created_at, created_by
  FROM report_requests;
DROP TABLE report_requests;
ALTER TABLE report_requests_new RENAME TO report_requests;
CREATE INDEX report_requests_tenant_idx ON report_requests (tenant, created_at);
-- At most one current (not superseded) request per subject, period and template@version.
CREATE UNIQUE INDEX report_requests_current_idx
    ON report_requests (tenant, subject, period, template_id, template_version)
    WHERE superseded_by IS NULL;
