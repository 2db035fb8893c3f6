-- A job's end wakes jobs parked at a cap once per statement instead of
-- once per row. The row trigger ran a function for every job that left
-- RUNNING, each call probing the parked jobs' indexes, which are empty
-- unless a cap is reached. The statement trigger looks once whether any
-- job is parked at all (one probe of each parked index), and only then,
-- for each tenant and kind whose jobs ended, wakes as many jobs parked at
-- the tenant's cap and at the kind's cap as ended there, in rank order:
-- what the row trigger woke, one job per end. It shares the transition
-- tables the job counters' UPDATE trigger already keeps.
DROP TRIGGER jobs_wake_parked ON jobs;
DROP FUNCTION wake_parked();

CREATE FUNCTION wake_parked_statement() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended RECORD;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobs p WHERE p.capped = 'tenant' AND p.status = 'QUEUED')
       AND NOT EXISTS (SELECT 1 FROM jobs p WHERE p.capped = 'kind' AND p.status = 'QUEUED') THEN
        RETURN NULL;
    END IF;
    FOR ended IN
        SELECT o.tenant_id, o.kind, count(*) AS n
        FROM old_rows o JOIN new_rows n ON n.job_id = o.job_id
        WHERE o.status = 'RUNNING' AND n.status <> 'RUNNING'
        GROUP BY 1, 2
        ORDER BY 1, 2
    LOOP
        WITH woken AS (
            UPDATE jobs SET capped = NULL
            WHERE job_id = ANY (ARRAY(
                SELECT p.job_id FROM jobs p
                WHERE p.tenant_id = ended.tenant_id AND p.capped = 'tenant'
                  AND p.status = 'QUEUED'
                ORDER BY p.rank_at, p.job_id LIMIT ended.n FOR UPDATE SKIP LOCKED
            ) || ARRAY(
                SELECT p.job_id FROM jobs p
                WHERE p.tenant_id = ended.tenant_id AND p.kind = ended.kind
                  AND p.capped = 'kind' AND p.status = 'QUEUED'
                ORDER BY p.rank_at, p.job_id LIMIT ended.n FOR UPDATE SKIP LOCKED))
            RETURNING job_id, rank_at
        )
        INSERT INTO outbox (job_id, publish_at, rank_at, republish_ms)
        SELECT job_id, to_timestamp(0), rank_at, 0 FROM woken
        ON CONFLICT (job_id) DO UPDATE SET publish_at = excluded.publish_at, republish_ms = 0;
    END LOOP;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_wake_parked AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION wake_parked_statement();
