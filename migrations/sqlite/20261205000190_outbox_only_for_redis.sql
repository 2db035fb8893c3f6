-- The outbox bridges the database and Redis, and serves nothing else
-- (`docs/design.md`, The job row is the queue). Where the job rows are the
-- queue, a job that becomes due later is claimable from its row as it is,
-- and an idle worker finds it by looking.

-- Present when the job rows are the queue: written by every process that
-- starts without Redis, removed by every process that starts with it.
-- Statements that make a job due ask it, so the trigger that wakes jobs
-- parked at a cap needs no setting of its own.
CREATE TABLE queue_in_job_rows (
    only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row)
);

-- A job that stops running wakes the first job of its tenant parked at the
-- tenant's cap, and the first parked at its kind's cap; an outbox row each
-- only where Redis is the queue. Each is chosen by the same query twice
-- (its outbox row, then its mark), with nothing in between to change the
-- answer.
DROP TRIGGER jobs_wake_parked;
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
    WHERE NOT EXISTS (SELECT 1 FROM queue_in_job_rows)
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
