-- 002_api_keys: hashed API keys with tenant and scopes (lockstep with postgres/002_api_keys.sql)
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    scopes TEXT NOT NULL,            -- comma-separated: submit,read,admin
    key_hash TEXT NOT NULL,          -- sha256 of the secret part; the key itself is never stored
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant);
