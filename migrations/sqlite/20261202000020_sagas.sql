-- Sagas (docs/sagas.md): the same tables as on Postgres (see
-- migrations/postgres). One row per saga job once its first attempt starts: which way it is
-- going, and why it turned back.
CREATE TABLE saga_runs (
    job_id        TEXT PRIMARY KEY REFERENCES jobs (job_id) ON DELETE CASCADE,
    -- forward: running its steps; compensating: undoing them; completed
    -- and compensated: nothing left to do (the job's final write follows).
    phase         TEXT NOT NULL CHECK (phase IN ('forward', 'compensating', 'completed', 'compensated')),
    -- Why it turned back: 'failed' (a step failed) or 'cancelled'.
    cause         TEXT CHECK (cause IN ('failed', 'cancelled')),
    error_type    TEXT,
    error_message TEXT,
    updated_at    BIGINT NOT NULL
);

-- One row per step once it started. Every write is fenced by the job's
-- attempt (in the store), and a local step's row is written in the same
-- transaction as its effect.
CREATE TABLE saga_steps (
    job_id        TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
    step_index    BIGINT NOT NULL,
    name          TEXT NOT NULL,
    -- running: started, outcome unknown (a retry, or the next attempt,
    -- runs it again with the same idempotency key); done; failed.
    outcome       TEXT NOT NULL CHECK (outcome IN ('running', 'done', 'failed')),
    attempts      BIGINT NOT NULL DEFAULT 0,
    started_at    BIGINT NOT NULL,
    finished_at   BIGINT,
    error_type    TEXT,
    error_message TEXT,
    output        TEXT,                        -- JSON, once done
    -- none: nothing to undo (not done, or refused outright); pending;
    -- running; done.
    compensation               TEXT NOT NULL DEFAULT 'none'
                                   CHECK (compensation IN ('none', 'pending', 'running', 'done')),
    compensation_attempts      BIGINT NOT NULL DEFAULT 0,
    compensation_started_at    BIGINT,
    compensation_finished_at   BIGINT,
    compensation_error_type    TEXT,
    compensation_error_message TEXT,
    PRIMARY KEY (job_id, step_index)
);

-- period-close: a month's state per tenant. No row: open. 'locked' while a
-- period-close job runs (imports dated in the month are refused), 'closed'
-- once it recorded the filing; reopening deletes the row.
CREATE TABLE periods (
    tenant_id        TEXT NOT NULL,
    month            TEXT NOT NULL,  -- YYYY-MM
    state            TEXT NOT NULL CHECK (state IN ('locked', 'closed')),
    job_id           TEXT NOT NULL,              -- the period-close job that locked it
    locked_at        BIGINT NOT NULL,
    closed_at        BIGINT,
    filing_reference TEXT,                       -- the receiver's, when it gave one
    PRIMARY KEY (tenant_id, month)
);

-- Where a tenant's period-close jobs file their returns. The secret signs
-- each request as webhooks are signed, so it is kept in clear.
CREATE TABLE filing_endpoints (
    tenant_id  TEXT PRIMARY KEY,
    url        TEXT NOT NULL,
    secret     TEXT NOT NULL,                    -- whsec_ + base64
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
