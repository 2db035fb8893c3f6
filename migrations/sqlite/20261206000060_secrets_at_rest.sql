-- Webhook and filing endpoint secrets at rest: sealed with AES-256-GCM
-- under a data key, itself sealed (wrapped) under a master key from
-- RECEIPT_MASTER_KEYS or the key file beside the database
-- (docs/operations.md, Secrets at rest). Expand only: a new table and new
-- columns. SQLite cannot make `secret` nullable without rebuilding the
-- table, so a sealed row's `secret` holds '(sealed)', which is not
-- base64: a process of the release before refuses to sign with it rather
-- than signing with a wrong key.
CREATE TABLE data_keys (
    key_id             TEXT PRIMARY KEY,      -- dk_ + UUIDv7 hex
    master_fingerprint TEXT NOT NULL,         -- first 16 hex of SHA-256 of the master key
    wrapped_key        TEXT NOT NULL,         -- v1: + base64 (nonce, ciphertext)
    created_at         BIGINT NOT NULL
);

-- The data key is a column of its own, not only inside the sealed text:
-- the database refuses to delete a data key a secret still uses.
ALTER TABLE webhooks ADD COLUMN sealed_secret TEXT;
ALTER TABLE webhooks ADD COLUMN secret_key_id TEXT REFERENCES data_keys (key_id);
ALTER TABLE filing_endpoints ADD COLUMN sealed_secret TEXT;
ALTER TABLE filing_endpoints ADD COLUMN secret_key_id TEXT REFERENCES data_keys (key_id);
CREATE INDEX webhooks_by_secret_key ON webhooks (secret_key_id);
CREATE INDEX filing_endpoints_by_secret_key ON filing_endpoints (secret_key_id);
