-- API keys get a lifecycle: an id to name a key by (in `api keys list` and
-- `api keys revoke`), a visible prefix to recognise it by, when it was last
-- used, and when and why it was revoked. A revoked row stays, so a revoked
-- key can never come back by accident (see `revoked_reason`). SQLite cannot
-- make an added column NOT NULL: the table is rebuilt.
CREATE TABLE api_keys_with_lifecycle (
    key_hash       TEXT PRIMARY KEY,
    -- Not secret, but random: an id derived from the hash would publish
    -- part of the hash of an operator-chosen key.
    key_id         TEXT NOT NULL UNIQUE,
    tenant_id      TEXT NOT NULL,
    -- The first characters of the key, for people to recognise it; unknown
    -- (NULL) for keys stored before this migration.
    key_prefix     TEXT,
    created_at     BIGINT NOT NULL,
    -- Written at most once a minute per key and process, never per request.
    last_used_at   BIGINT,
    revoked_at     BIGINT,
    -- 'command': `api keys revoke`, for good; 'api_keys': left out of
    -- API_KEYS at a start, and valid again if a later start lists it.
    revoked_reason TEXT
);
INSERT INTO api_keys_with_lifecycle (key_hash, key_id, tenant_id, created_at)
    SELECT key_hash, 'key_' || lower(hex(randomblob(8))), tenant_id, created_at FROM api_keys;
DROP TABLE api_keys;
ALTER TABLE api_keys_with_lifecycle RENAME TO api_keys;

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
