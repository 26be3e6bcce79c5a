-- 005_template_owners: every template id belongs to one tenant, or is shared with all tenants (NULL,
-- published by an operator) (lockstep with postgres/005_template_owners.sql). Reads, new versions and
-- report requests are checked against the owner; versions themselves stay immutable.
CREATE TABLE template_owners (
    template_id TEXT PRIMARY KEY,
    tenant TEXT,                    -- NULL: shared with every tenant
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL
);
-- Templates created before owners existed: owned by the tenant of the API key that created version 1;
-- versions created without a key (the CLI, run by whoever holds the database) become shared, which is
-- how every template behaved before.
INSERT INTO template_owners (template_id, tenant, created_at, created_by)
SELECT t.id, (SELECT k.tenant FROM api_keys k WHERE 'key:' || k.id = t.created_by), t.created_at, t.created_by
  FROM templates t
 WHERE t.version = 1;
