-- 011_data_keys: each job's data key, stored only wrapped by a key-encryption key (docs/encryption.md;
-- lockstep with sqlite/011_data_keys.sql). data_key_provider names the key provider ("local", "aws-kms"),
-- data_key_kek_id the key-encryption key that wrapped it, data_key_wrapped the wrapped key (base64 text:
-- useless without that key). A NULL provider is a job stored before encryption: its objects are read as
-- plaintext, decided by this row, never by the bytes. Deletion sets data_key_wrapped to NULL and
-- data_key_destroyed_at in the tombstone's own UPDATE: every copy of the job's objects is then unreadable.
-- Expand-only (nullable columns): a binary of the release before keeps working against this schema.
ALTER TABLE jobs ADD COLUMN data_key_provider TEXT;
ALTER TABLE jobs ADD COLUMN data_key_kek_id TEXT;
ALTER TABLE jobs ADD COLUMN data_key_wrapped TEXT;
ALTER TABLE jobs ADD COLUMN data_key_destroyed_at timestamptz;
