-- Priorities and concurrency caps: as on Postgres (see its migration of the
-- same name), with times in milliseconds. The claim's caps are counted in
-- the claim's own write transaction (`sqlite::attempts::claim`): SQLite
-- has one writer, so no lock of its own is needed.
ALTER TABLE jobs ADD COLUMN priority TEXT NOT NULL DEFAULT 'normal'
    CHECK (priority IN ('high', 'normal', 'low'));
ALTER TABLE jobs ADD COLUMN rank_at BIGINT;
ALTER TABLE jobs ADD COLUMN capped TEXT CHECK (capped IN ('tenant', 'kind'));
UPDATE jobs SET rank_at = run_after WHERE status IN ('QUEUED', 'RUNNING');

CREATE INDEX jobs_parked_at_tenant_cap ON jobs (tenant_id, rank_at, job_id)
    WHERE capped = 'tenant' AND status = 'QUEUED';
CREATE INDEX jobs_parked_at_kind_cap ON jobs (tenant_id, kind, rank_at, job_id)
    WHERE capped = 'kind' AND status = 'QUEUED';

ALTER TABLE schedules ADD COLUMN priority TEXT NOT NULL DEFAULT 'normal'
    CHECK (priority IN ('high', 'normal', 'low'));

ALTER TABLE outbox ADD COLUMN rank_at BIGINT NOT NULL DEFAULT 0;
UPDATE outbox SET rank_at = publish_at;
CREATE INDEX outbox_ready ON outbox (rank_at) WHERE republish_ms = 0;
CREATE INDEX outbox_waiting ON outbox (publish_at) WHERE republish_ms = 0;
CREATE INDEX outbox_lapsing ON outbox (publish_at) WHERE republish_ms > 0;
DROP INDEX outbox_due;

-- A job that stops running wakes the first job of its tenant parked at the
-- tenant's cap, and the first parked at its kind's cap. Each is chosen by
-- the same query twice (its outbox row, then its mark), with nothing in
-- between to change the answer.
CREATE TRIGGER jobs_wake_parked AFTER UPDATE OF status ON jobs
WHEN OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING'
BEGIN
    INSERT INTO outbox (job_id, publish_at, rank_at, republish_ms)
    SELECT job_id, 0, rank_at, 0 FROM (
        SELECT job_id, rank_at FROM (
            SELECT p.job_id, p.rank_at FROM jobs p
            WHERE p.tenant_id = OLD.tenant_id AND p.capped = 'tenant' AND p.status = 'QUEUED'
            ORDER BY p.rank_at, p.job_id LIMIT 1)
        UNION ALL
        SELECT job_id, rank_at FROM (
            SELECT p.job_id, p.rank_at FROM jobs p
            WHERE p.tenant_id = OLD.tenant_id AND p.kind = OLD.kind AND p.capped = 'kind'
              AND p.status = 'QUEUED'
            ORDER BY p.rank_at, p.job_id LIMIT 1))
    WHERE true
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
