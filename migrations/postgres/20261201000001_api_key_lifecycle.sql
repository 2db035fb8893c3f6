-- API keys get a lifecycle: an id to name a key by (in `api keys list` and
-- `api keys revoke`), a visible prefix to recognise it by, when it was last
-- used, and when and why it was revoked. A revoked row stays, so a revoked
-- key can never come back by accident (see `revoked_reason`).
ALTER TABLE api_keys ADD COLUMN key_id TEXT;
-- Key ids are not secret, but random: one derived from the hash would
-- publish part of the hash of an operator-chosen key.
UPDATE api_keys SET key_id = 'key_' || substr(md5(random()::text || key_hash), 1, 16);
ALTER TABLE api_keys ALTER COLUMN key_id SET NOT NULL;
CREATE UNIQUE INDEX api_keys_key_id ON api_keys (key_id);
-- The first characters of the key, for people to recognise it; unknown
-- (NULL) for keys stored before this migration.
ALTER TABLE api_keys ADD COLUMN key_prefix TEXT;
-- Written at most once a minute per key and process, never per request.
ALTER TABLE api_keys ADD COLUMN last_used_at BIGINT;
ALTER TABLE api_keys ADD COLUMN revoked_at BIGINT;
-- 'command': `api keys revoke`, for good; 'api_keys': left out of API_KEYS
-- at a start, and valid again if a later start lists it.
ALTER TABLE api_keys ADD COLUMN revoked_reason TEXT;

-- Bumped in the same transaction as every change to which keys are valid
-- (a key added, revoked, restored or moved to another tenant). Every api
-- process reads this one row every second and reloads its set of valid
-- keys only when it moved: the clocks of several processes cannot be
-- trusted to order their changes, a counter can.
CREATE TABLE api_key_generation (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    generation BIGINT NOT NULL
);
INSERT INTO api_key_generation (singleton, generation) VALUES (1, 1);
