-- Every change to a tenant's setup that is not a job (keys, webhooks,
-- schedules, the filing endpoint, months closed and reopened, registered
-- kinds, secrets rotated), written in the transaction of the change
-- itself. Kept for AUDIT_RETENTION, apart from jobs' retention.
CREATE TABLE audit_log (
    entry_id   TEXT PRIMARY KEY,     -- aud_ + UUIDv7 hex: sorts by time
    tenant_id  TEXT,                 -- NULL: the whole deployment
    at         INTEGER NOT NULL,
    actor      TEXT NOT NULL CHECK (actor IN ('key', 'job', 'command')),
    key_id     TEXT,                 -- the key that made the change
    job_id     TEXT,                 -- the job that made it
    request_id TEXT,
    action     TEXT NOT NULL,
    target     TEXT,                 -- the id of what changed
    details    TEXT NOT NULL         -- JSON
);
CREATE INDEX audit_log_by_tenant ON audit_log (tenant_id, entry_id DESC);
CREATE INDEX audit_log_by_tenant_action ON audit_log (tenant_id, action, entry_id DESC);
CREATE INDEX audit_log_by_time ON audit_log (at);
