-- Webhooks (API.md, Webhooks). The secret is kept in clear: it must be
-- read to sign every delivery (unlike API keys, which are only compared).
CREATE TABLE webhooks (
    webhook_id  TEXT COLLATE "C" PRIMARY KEY,  -- wh_ + UUIDv7 hex
    tenant_id   TEXT NOT NULL,
    url         TEXT NOT NULL,
    events      TEXT NOT NULL,                 -- ",job.succeeded,job.failed," (commas around each)
    job_id      TEXT,                          -- set: only this job's events
    enabled     BIGINT NOT NULL DEFAULT 1,     -- 0 after a 410 answer
    secret      TEXT NOT NULL,                 -- whsec_ + base64
    created_at  BIGINT NOT NULL
);
CREATE INDEX webhooks_by_tenant ON webhooks (tenant_id, webhook_id);
CREATE INDEX webhooks_by_job ON webhooks (job_id) WHERE job_id IS NOT NULL;

-- One row per (final status, matching webhook), written in the transaction
-- that writes the final status: the outbox of deliveries. `body` is fixed
-- at creation so every retry sends the same bytes under the same id.
CREATE TABLE webhook_events (
    event_id        TEXT COLLATE "C" PRIMARY KEY,  -- evt_ + UUIDv7 hex: the webhook-id header
    webhook_id      TEXT NOT NULL REFERENCES webhooks (webhook_id) ON DELETE CASCADE,
    event_type      TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    next_attempt_at BIGINT NOT NULL                -- due time, or the lease of a delivery under way
);
CREATE INDEX webhook_events_due ON webhook_events (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_events_by_webhook ON webhook_events (webhook_id);

-- Every delivery attempt, for GET /v1/webhooks/{id}/deliveries.
CREATE TABLE webhook_deliveries (
    delivery_id     TEXT COLLATE "C" PRIMARY KEY,  -- UUIDv7 hex: newest last
    webhook_id      TEXT NOT NULL REFERENCES webhooks (webhook_id) ON DELETE CASCADE,
    event_id        TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    response_status BIGINT,
    error           TEXT,
    duration_ms     BIGINT NOT NULL,
    attempted_at    BIGINT NOT NULL,
    next_attempt_at BIGINT
);
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, delivery_id);
