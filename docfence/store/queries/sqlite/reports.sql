-- The report pipeline's SQL (SQLite). Same query names as postgres/reports.sql. Times are REAL epoch
-- seconds; `:now` is the injected clock or NULL (then the database clock).

-- name: insert_template_version
-- Add the next version (max + 1) of a template; versions are never updated.
INSERT INTO templates (id, version, name, sha256, html, css, assets, json_schema, created_at, created_by)
SELECT :id, coalesce(max(version), 0) + 1, :template_name, :sha256, :html, :css, :assets, :json_schema,
       coalesce(:now, (julianday('now') - 2440587.5) * 86400.0), :created_by
  FROM templates WHERE id = :id
RETURNING *;

-- name: claim_template_owner
-- The first version of a template id names its owner (a tenant, or NULL: shared); later calls change nothing.
INSERT INTO template_owners (template_id, tenant, created_at, created_by)
VALUES (:id, :owner, coalesce(:now, (julianday('now') - 2440587.5) * 86400.0), :created_by)
ON CONFLICT (template_id) DO NOTHING;

-- name: get_template_owner
-- Who owns a template id (no row: the id is unused).
SELECT template_id, tenant FROM template_owners WHERE template_id = :id;

-- name: get_template
-- One template version with its owner, if :visible_to may see it ('*': anyone; NULL: shared ones only;
-- a tenant: its own and shared ones).
SELECT t.*, o.tenant AS owner FROM templates t JOIN template_owners o ON o.template_id = t.id
 WHERE t.id = :id AND t.version = :version AND (:visible_to = '*' OR o.tenant IS NULL OR o.tenant = :visible_to);

-- name: get_latest_template
-- The newest version of a template, with the same visibility rule as get_template.
SELECT t.*, o.tenant AS owner FROM templates t JOIN template_owners o ON o.template_id = t.id
 WHERE t.id = :id AND (:visible_to = '*' OR o.tenant IS NULL OR o.tenant = :visible_to)
 ORDER BY t.version DESC LIMIT 1;

-- name: list_templates
-- Template versions (without their bodies) that :visible_to may see, optionally of one template.
SELECT t.id, t.version, t.name, t.sha256, t.created_at, t.created_by, o.tenant AS owner
  FROM templates t JOIN template_owners o ON o.template_id = t.id
 WHERE (:id IS NULL OR t.id = :id) AND (:visible_to = '*' OR o.tenant IS NULL OR o.tenant = :visible_to)
 ORDER BY t.id, t.version LIMIT :limit;

-- name: insert_report_request
-- Create a report request (revision 1, or a correction of :supersedes), or nothing when the same
-- (tenant, subject, period, template@version) already has a current request or this revision.
INSERT INTO report_requests (id, tenant, subject, period, template_id, template_version, template_sha256,
                             variant, document_class, region, retention_until, processor, data_sha256,
                             schedule_id, created_at, created_by, revision, supersedes, watermark)
SELECT :id, :tenant, :subject, :period, :template_id, :template_version, :template_sha256, :variant,
       :document_class, :region, t.now + :retention_s, :processor, :data_sha256, :schedule_id, t.now,
       :created_by, :revision, :supersedes, :watermark
  FROM (SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0) AS now) AS t
 WHERE true
ON CONFLICT DO NOTHING
RETURNING *;

-- name: find_report_request
-- The current (not superseded) request of a (tenant, subject, period, template@version).
SELECT * FROM report_requests
 WHERE tenant = :tenant AND subject = :subject AND period = :period AND template_id = :template_id
   AND template_version = :template_version AND superseded_by IS NULL;

-- name: mark_report_request_superseded
-- Fenced: only a current request can be superseded; nothing when another correction came first.
UPDATE report_requests
   SET superseded_by = :new_id, superseded_at = coalesce(:now, (julianday('now') - 2440587.5) * 86400.0)
 WHERE id = :id AND superseded_by IS NULL
RETURNING *;

-- name: get_report_request
-- One report request by id.
SELECT * FROM report_requests WHERE id = :id;

-- name: list_report_requests
-- A tenant's report requests, newest first, bounded.
SELECT * FROM report_requests WHERE tenant = :tenant ORDER BY created_at DESC, id DESC LIMIT :limit;

-- name: list_request_jobs
-- The jobs of a report request, oldest first (a retry is a new job linked to the failed one).
SELECT * FROM jobs WHERE report_request_id = :request_id ORDER BY created_at, id;

-- name: insert_schedule
-- Create a schedule, or nothing when (tenant, subject, template@version) already has one.
INSERT INTO schedules (id, tenant, subject, template_id, template_version, day_of_month, catch_up_periods,
                       variant, document_class, processor, last_period, created_at, created_by)
VALUES (:id, :tenant, :subject, :template_id, :template_version, :day_of_month, :catch_up_periods,
        :variant, :document_class, :processor, :last_period,
        coalesce(:now, (julianday('now') - 2440587.5) * 86400.0), :created_by)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: find_schedule
-- The schedule of a (tenant, subject, template@version).
SELECT * FROM schedules
 WHERE tenant = :tenant AND subject = :subject AND template_id = :template_id
   AND template_version = :template_version;

-- name: get_schedule
-- One schedule by id.
SELECT * FROM schedules WHERE id = :id;

-- name: list_schedules
-- Schedules, optionally of one tenant, oldest first.
SELECT * FROM schedules WHERE (:tenant IS NULL OR tenant = :tenant) ORDER BY created_at, id;

-- name: advance_schedule
-- Record that the request of :period exists; never moves a schedule backwards.
UPDATE schedules SET last_period = :period
 WHERE id = :id AND (last_period IS NULL OR last_period < :period)
RETURNING *;

-- name: upsert_provider_observation
-- Persist one poll pass (fenced: only the current attempt's lease holder writes); zero rows = stale.
INSERT INTO provider_observations (job_id, attempt, provider, provider_job_id, status, kind, http_status,
                                   reason, observed_at, passes, outcome)
SELECT :job_id, :attempt, :provider, :provider_job_id, :status, :kind, :http_status, :reason,
       coalesce(:observed_at, :now, (julianday('now') - 2440587.5) * 86400.0), 1, NULL
  FROM jobs
 WHERE id = :job_id AND attempt = :attempt AND state = 'rendering' AND lease_owner = :worker
ON CONFLICT (job_id) DO UPDATE SET
       passes = CASE WHEN provider_observations.attempt = excluded.attempt
                     THEN provider_observations.passes + 1 ELSE 1 END,
       status = coalesce(excluded.status, CASE WHEN provider_observations.attempt = excluded.attempt
                                               THEN provider_observations.status END),
       provider_job_id = coalesce(excluded.provider_job_id, provider_observations.provider_job_id),
       attempt = excluded.attempt, provider = excluded.provider, kind = excluded.kind,
       http_status = excluded.http_status, reason = excluded.reason, observed_at = excluded.observed_at,
       outcome = NULL
RETURNING *;

-- name: finish_provider_observation
-- Record the terminal outcome of the current attempt's polling.
UPDATE provider_observations SET outcome = :outcome
 WHERE job_id = :job_id AND attempt = :attempt
RETURNING *;

-- name: get_provider_observation
-- The last observation of a provider-rendered job.
SELECT * FROM provider_observations WHERE job_id = :job_id;

-- name: truncate_reports
-- Tests only: empty the report pipeline's tables.
DELETE FROM provider_observations; DELETE FROM schedules; DELETE FROM report_requests; DELETE FROM templates;
DELETE FROM template_owners;
