-- The outbox bridges the database and Redis, and serves nothing else
-- (`docs/design.md`, The job row is the queue). Where the job rows are the
-- queue, a job that becomes due later (a delayed job, a retry after its
-- backoff, a hand-back, a lapsed lease, a job woken at a cap, a schedule's
-- fire) is claimable from its row as it is: what its outbox row did there
-- was wake a worker when it came due, which a NOTIFY carrying its due time
-- and a timer on the next due time now do.

-- Present when the job rows are the queue: written by every process that
-- starts without Redis, removed by every process that starts with it.
-- Statements that make a job due ask it, so the triggers that wake jobs
-- parked at a cap need no setting of their own.
CREATE TABLE queue_in_job_rows (
    only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row)
);

-- The next due time an idle worker sleeps until: jobs that were not due
-- when made (delayed, retried, handed back). A job due at once is never
-- in it, so a submit writes no entry.
CREATE INDEX jobs_due_later ON jobs (run_after)
    WHERE status = 'QUEUED' AND capped IS NULL AND run_after > created_at;

-- Hands jobs just made due, or due at `due_at`, to the queue: an outbox
-- row each where Redis is the queue (due at its time, at its rank), else
-- one NOTIFY carrying the earliest due time (unix ms), which wakes idle
-- workers or moves their timer. The arrays are parallel; the values are
-- passed, not read, so a statement can hand over the rows it inserts.
CREATE FUNCTION queue_jobs(ids TEXT[], due_at timestamptz[], ranks timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(ids) IS NULL OR cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM queue_in_job_rows) THEN
        PERFORM pg_notify('receipt_queue', (SELECT
            floor(extract(epoch FROM min(d)) * 1000)::bigint::text FROM unnest(due_at) AS d));
        RETURN;
    END IF;
    INSERT INTO outbox (job_id, publish_at, rank_at, republish_ms)
    SELECT q.job_id, q.due, q.rank_at, 0 FROM unnest(ids, due_at, ranks) AS q (job_id, due, rank_at)
    ON CONFLICT (job_id) DO UPDATE SET publish_at = excluded.publish_at,
        rank_at = excluded.rank_at, republish_ms = 0;
END
$$;

-- A job's end wakes jobs parked at a cap (see the migration
-- `wake_parked_per_statement`), and hands them to the queue.
CREATE OR REPLACE FUNCTION wake_parked_statement() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ended RECORD;
    woken_ids TEXT[];
    woken_due timestamptz[];
    woken_ranks timestamptz[];
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
            RETURNING job_id, run_after, rank_at
        )
        SELECT array_agg(job_id), array_agg(run_after), array_agg(rank_at)
        INTO woken_ids, woken_due, woken_ranks FROM woken;
        PERFORM queue_jobs(woken_ids, woken_due, woken_ranks);
    END LOOP;
    RETURN NULL;
END
$$;
