-- Data keys after a rotation: the rewrap pass moves each job's wrapped data key under the current
-- key-encryption key, one row at a time (the objects are never touched: their data key is the same).

-- name: select_rewrap_due
-- A bounded batch of jobs, in id order after :after, whose live wrapped key is not under the current
-- (provider, key-encryption key id); destroyed keys (NULL) and plaintext jobs are never listed.
SELECT id, tenant, data_key_provider, data_key_kek_id, data_key_wrapped FROM jobs
 WHERE data_key_wrapped IS NOT NULL AND data_key_provider IS NOT NULL
   AND NOT (data_key_provider = :provider AND coalesce(data_key_kek_id, '') = :kek_id)
   AND id > :after
 ORDER BY id LIMIT :limit;

-- name: replace_wrapped_key
-- One job's wrapped key, re-wrapped: only while the row still holds the key the pass unwrapped (zero
-- rows: destroyed by a deletion, or re-wrapped by another pass meanwhile; the caller skips it).
UPDATE jobs
   SET data_key_provider = :provider, data_key_kek_id = :kek_id, data_key_wrapped = :wrapped
 WHERE id = :id AND data_key_wrapped = :old;

-- name: count_data_keys
-- How many live wrapped keys each (provider, key-encryption key id) holds.
SELECT data_key_provider AS provider, coalesce(data_key_kek_id, '') AS kek_id, count(*) AS n FROM jobs
 WHERE data_key_wrapped IS NOT NULL AND data_key_provider IS NOT NULL
 GROUP BY data_key_provider, coalesce(data_key_kek_id, '')
 ORDER BY data_key_provider, coalesce(data_key_kek_id, '');
