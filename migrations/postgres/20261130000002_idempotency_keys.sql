-- Idempotency keys (API.md, Idempotency). A row is written in the same
-- transaction as the request's effect and its response, so a key is either
-- absent or complete with the response to replay; the primary key settles
-- concurrent requests with one key.
CREATE TABLE idempotency_keys (
    tenant_id        TEXT NOT NULL,
    idem_key         TEXT NOT NULL,
    fingerprint      TEXT NOT NULL,   -- SHA-256 of method, path and canonical JSON body
    created_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL, -- after this the key is new again
    response_status  BIGINT NOT NULL,
    response_headers TEXT NOT NULL,   -- JSON [[name, value], ...] of the headers replayed
    response_body    BYTEA NOT NULL,
    PRIMARY KEY (tenant_id, idem_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
