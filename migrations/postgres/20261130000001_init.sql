-- Receipt's schema on Postgres. Times are unix milliseconds (BIGINT) and
-- flags are 0/1 (BIGINT), the same types as on SQLite, so one set of
-- queries serves both through sqlx's Any driver.

-- API keys, hashed (SHA-256 hex); the clear key is never stored.
CREATE TABLE api_keys (
    key_hash   TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- The source of truth for every job. `attempts` is also the fencing token:
-- an attempt's writes apply only while it is still the current one.
CREATE TABLE jobs (
    job_id           TEXT COLLATE "C" PRIMARY KEY, -- job_ + UUIDv7 hex: sorts by time
    tenant_id        TEXT NOT NULL,
    kind             TEXT NOT NULL,
    params           TEXT NOT NULL,           -- JSON as submitted
    status           TEXT NOT NULL CHECK (status IN ('QUEUED','RUNNING','SUCCEEDED','FAILED','CANCELLED')),
    attempts         BIGINT NOT NULL DEFAULT 0,
    max_attempts     BIGINT NOT NULL,
    progress         DOUBLE PRECISION,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    run_after        BIGINT NOT NULL,         -- a retry is not claimed before this
    lease_expires_at BIGINT,                  -- set while RUNNING
    worker_id        TEXT,
    error_type       TEXT,                    -- the last attempt's error
    error_message    TEXT,
    cancel_requested BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_tenant ON jobs (tenant_id, job_id DESC);
CREATE INDEX jobs_by_tenant_status ON jobs (tenant_id, status, job_id DESC);
CREATE INDEX jobs_by_tenant_kind ON jobs (tenant_id, kind, job_id DESC);
-- Small: only running jobs, for the lease sweeper.
CREATE INDEX jobs_running_leases ON jobs (lease_expires_at) WHERE status = 'RUNNING';

CREATE TABLE job_results (
    job_id TEXT PRIMARY KEY REFERENCES jobs (job_id) ON DELETE CASCADE,
    body   TEXT NOT NULL
);

-- The transactional outbox: a row exists while a job needs the queue's
-- attention. Written in the same transaction as the job's state change,
-- published by the relay, removed when an attempt is claimed.
CREATE TABLE outbox (
    job_id     TEXT PRIMARY KEY REFERENCES jobs (job_id) ON DELETE CASCADE,
    publish_at BIGINT NOT NULL
);
CREATE INDEX outbox_due ON outbox (publish_at);

CREATE TABLE ledger_entries (
    tenant_id    TEXT NOT NULL,
    -- Byte order ("C"), as on SQLite, so exports sort ids alike everywhere.
    entry_id     TEXT COLLATE "C" NOT NULL,   -- the client's id
    entry_date   TEXT COLLATE "C" NOT NULL,   -- YYYY-MM-DD
    direction    TEXT NOT NULL CHECK (direction IN ('sale','purchase')),
    amount_paise BIGINT NOT NULL CHECK (amount_paise >= 0),
    rate_centi   BIGINT NOT NULL,             -- GST rate in hundredths of a percent
    interstate   BIGINT NOT NULL,
    party        TEXT NOT NULL,
    description  TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, entry_id)
);
-- The export reads in (date, id) order.
CREATE INDEX ledger_by_date ON ledger_entries (tenant_id, entry_date, entry_id);
-- The GST summary is answered from this index alone.
CREATE INDEX ledger_gst ON ledger_entries (tenant_id, entry_date)
    INCLUDE (direction, rate_centi, interstate, amount_paise);
