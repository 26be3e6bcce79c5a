-- 008_job_labels: a caller's label and the upload's original filename on each job (lockstep with
-- sqlite/008_job_labels.sql). Both are the caller's own words: shown back to that tenant, searched by
-- exact value, never logged. The partial indexes serve `GET /v1/jobs?label=` and the console search,
-- newest first within a tenant, and cost nothing for jobs that carry neither. `sealed_password` says the
-- job's password is sealed beside its input (blobs/sealed.py); the password itself is never in the database.
ALTER TABLE jobs ADD COLUMN label TEXT;
ALTER TABLE jobs ADD COLUMN filename TEXT;
ALTER TABLE jobs ADD COLUMN sealed_password BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX jobs_tenant_label_idx ON jobs (tenant, label, created_at) WHERE label IS NOT NULL;
CREATE INDEX jobs_tenant_filename_idx ON jobs (tenant, filename, created_at) WHERE filename IS NOT NULL;
