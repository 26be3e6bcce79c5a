-- 006_report_revisions: a report request can be superseded by a corrected one for the same subject,
-- period and template@version (lockstep with sqlite/006_report_revisions.sql). The old request and
-- its failed jobs stay as evidence; `supersedes`/`superseded_by` link the two, `revision` counts them.
ALTER TABLE report_requests ADD COLUMN revision INTEGER NOT NULL DEFAULT 1 CHECK (revision >= 1);
ALTER TABLE report_requests ADD COLUMN supersedes TEXT;
ALTER TABLE report_requests ADD COLUMN superseded_by TEXT;
ALTER TABLE report_requests ADD COLUMN superseded_at TIMESTAMPTZ;
ALTER TABLE report_requests ADD COLUMN watermark TEXT;
-- The five-column UNIQUE of 003 was named by PostgreSQL; find it rather than guess the truncated name.
DO $$
DECLARE name TEXT;
BEGIN
    SELECT c.conname INTO name FROM pg_constraint c
     WHERE c.conrelid = 'report_requests'::regclass AND c.contype = 'u' AND cardinality(c.conkey) = 5;
    IF name IS NOT NULL THEN
        EXECUTE format('ALTER TABLE report_requests DROP CONSTRAINT %I', name);
    END IF;
END $$;
ALTER TABLE report_requests ADD CONSTRAINT report_requests_revision_key
    UNIQUE (tenant, subject, period, template_id, template_version, revision);
-- At most one current (not superseded) request per subject, period and template@version.
CREATE UNIQUE INDEX report_requests_current_idx
    ON report_requests (tenant, subject, period, template_id, template_version)
    WHERE superseded_by IS NULL;
