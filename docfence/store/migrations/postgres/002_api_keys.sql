-- 002_api_keys: hashed API keys with tenant and scopes (lockstep with sqlite/002_api_keys.sql)
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,
    key_hash TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    revoked_at TIMESTAMPTZ
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant);
