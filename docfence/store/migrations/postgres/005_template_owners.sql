-- 005_template_owners: every template id belongs to one tenant, or is shared with all tenants (NULL,
-- published by an operator) (lockstep with sqlite/005_template_owners.sql; see there).
CREATE TABLE template_owners (
    template_id TEXT PRIMARY KEY,
    tenant TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    created_by TEXT NOT NULL
);
INSERT INTO template_owners (template_id, tenant, created_at, created_by)
SELECT t.id, (SELECT k.tenant FROM api_keys k WHERE 'key:' || k.id = t.created_by), t.created_at, t.created_by
  FROM templates t
 WHERE t.version = 1;
