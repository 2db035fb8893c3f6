-- Report kinds a tenant registers, run by its own workers over HTTP
-- (`docs/workers.md`). Their jobs are rows of `jobs` like any other, marked
-- `external`: the built-in workers' claims never take them, and a worker's
-- lease takes only them.

CREATE TABLE registered_kinds (
    tenant_id          TEXT NOT NULL,
    name               TEXT NOT NULL,
    about              TEXT NOT NULL,
    params_schema      TEXT NOT NULL,       -- JSON Schema 2020-12 of a submit's body
    timeout_ms         BIGINT NOT NULL CHECK (timeout_ms > 0),
    max_attempts       BIGINT NOT NULL CHECK (max_attempts > 0),
    result_media_types TEXT NOT NULL,       -- JSON: the media types a result may have
    max_running        BIGINT CHECK (max_running > 0), -- the tenant's cap on running jobs of the kind
    priority           TEXT NOT NULL CHECK (priority IN ('high', 'normal', 'low')),
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    deleted_at         BIGINT,          -- deleted: refused at submit, its jobs still leased
    PRIMARY KEY (tenant_id, name)
);

-- `attempt_deadline` is when the running attempt of an external job must
-- end (its kind's timeout from its lease); a heartbeat never extends the
-- lease past it.
ALTER TABLE jobs ADD COLUMN external BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN attempt_deadline BIGINT;

-- Which API keys may do what: NULL is every right a key had before scopes
-- (everything but `work`); `work` keys lease and report attempts, of the
-- kinds in `kinds` (NULL: every kind of their tenant).
ALTER TABLE api_keys ADD COLUMN scopes TEXT;
ALTER TABLE api_keys ADD COLUMN kinds TEXT;

-- Workers' streamed results may be any media type: their chunks hold bytes.
ALTER TABLE job_result_chunks ADD COLUMN data BLOB;
ALTER TABLE job_result_chunks ADD COLUMN media_type TEXT;

-- The built-in claim's index leaves external jobs out; a lease reads its
-- own, by tenant and kind.
DROP INDEX jobs_claimable;
CREATE INDEX jobs_claimable ON jobs (tenant_id, rank_at, job_id)
    WHERE status = 'QUEUED' AND capped IS NULL AND NOT external;
CREATE INDEX jobs_leasable ON jobs (tenant_id, kind, rank_at, job_id)
    WHERE status = 'QUEUED' AND capped IS NULL AND external;

-- A job woken from a cap gets an outbox row only where Redis is the queue,
-- and only for the built-in kinds: a registered kind's job is leased from
-- its row.
DROP TRIGGER jobs_wake_parked;
CREATE TRIGGER jobs_wake_parked AFTER UPDATE OF status ON jobs
WHEN OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING'
BEGIN
    INSERT INTO outbox (job_id, publish_at, rank_at, republish_ms)
    SELECT job_id, 0, rank_at, 0 FROM (
        SELECT job_id, rank_at, external FROM (
            SELECT p.job_id, p.rank_at, p.external FROM jobs p
            WHERE p.tenant_id = OLD.tenant_id AND p.capped = 'tenant' AND p.status = 'QUEUED'
            ORDER BY p.rank_at, p.job_id LIMIT 1)
        UNION ALL
        SELECT job_id, rank_at, external FROM (
            SELECT p.job_id, p.rank_at, p.external FROM jobs p
            WHERE p.tenant_id = OLD.tenant_id AND p.kind = OLD.kind AND p.capped = 'kind'
              AND p.status = 'QUEUED'
            ORDER BY p.rank_at, p.job_id LIMIT 1))
    WHERE NOT EXISTS (SELECT 1 FROM queue_in_job_rows) AND NOT external
    ON CONFLICT (job_id) DO UPDATE SET publish_at = 0, republish_ms = 0;
    UPDATE jobs SET capped = NULL
    WHERE job_id = (
            SELECT p.job_id FROM jobs p
            WHERE p.tenant_id = OLD.tenant_id AND p.capped = 'tenant' AND p.status = 'QUEUED'
            ORDER BY p.rank_at, p.job_id LIMIT 1)
       OR job_id = (
            SELECT p.job_id FROM jobs p
            WHERE p.tenant_id = OLD.tenant_id AND p.kind = OLD.kind AND p.capped = 'kind'
              AND p.status = 'QUEUED'
            ORDER BY p.rank_at, p.job_id LIMIT 1);
END;
