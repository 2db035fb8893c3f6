-- Webhook and filing endpoint secrets at rest: sealed with AES-256-GCM
-- under a data key, itself sealed (wrapped) under a master key from
-- RECEIPT_MASTER_KEYS (docs/operations.md, Secrets at rest). Expand only:
-- a new table and nullable columns. The clear `secret` becomes nullable
-- and is set to NULL once the row's secret is sealed; a process of the
-- release before, which reads it as text, fails on such a row instead of
-- signing with a wrong key.
CREATE TABLE data_keys (
    key_id             TEXT PRIMARY KEY,      -- dk_ + UUIDv7 hex
    master_fingerprint TEXT NOT NULL,         -- first 16 hex of SHA-256 of the master key
    wrapped_key        TEXT NOT NULL,         -- v1: + base64 (nonce, ciphertext)
    created_at         timestamptz NOT NULL
);

-- The data key is a column of its own, not only inside the sealed text:
-- the database refuses to delete a data key a secret still uses.
ALTER TABLE webhooks
    ADD COLUMN sealed_secret TEXT,
    ADD COLUMN secret_key_id TEXT REFERENCES data_keys (key_id),
    ALTER COLUMN secret DROP NOT NULL;
ALTER TABLE filing_endpoints
    ADD COLUMN sealed_secret TEXT,
    ADD COLUMN secret_key_id TEXT REFERENCES data_keys (key_id),
    ALTER COLUMN secret DROP NOT NULL;
CREATE INDEX webhooks_by_secret_key ON webhooks (secret_key_id);
CREATE INDEX filing_endpoints_by_secret_key ON filing_endpoints (secret_key_id);
