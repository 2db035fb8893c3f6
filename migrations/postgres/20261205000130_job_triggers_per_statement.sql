-- The job counters' triggers run once per statement instead of once per
-- row: a group commit that claims or finishes many jobs appends one delta
-- per (tenant, kind, status, minute) it changed, not two per job. The
-- deltas mean the same (the sweeper folds them as before). A trigger with
-- transition tables cannot name columns, so the update trigger runs for
-- every UPDATE of jobs (leases, progress) and finds nothing to count there.
DROP TRIGGER job_counts_insert ON jobs;
DROP TRIGGER job_counts_update ON jobs;
DROP TRIGGER job_counts_delete ON jobs;
DROP FUNCTION job_counts_track();

CREATE FUNCTION job_counts_track_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_count_deltas (tenant_id, kind, status, minute, delta)
        SELECT tenant_id, kind, status,
               CASE WHEN status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                    THEN date_trunc('minute', finished_at) END AS minute,
               count(*)
        FROM new_rows GROUP BY 1, 2, 3, 4;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_count_deltas (tenant_id, kind, status, minute, delta)
        SELECT tenant_id, kind, status,
               CASE WHEN status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                    THEN date_trunc('minute', finished_at) END AS minute,
               -count(*)
        FROM old_rows GROUP BY 1, 2, 3, 4;
    ELSE
        INSERT INTO job_count_deltas (tenant_id, kind, status, minute, delta)
        SELECT tenant_id, kind, status, minute, sum(delta)
        FROM (
            SELECT side.tenant_id, side.kind, side.status,
                   CASE WHEN side.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                        THEN date_trunc('minute', side.finished_at) END AS minute,
                   side.delta
            FROM old_rows o JOIN new_rows n ON n.job_id = o.job_id
            CROSS JOIN LATERAL (
                VALUES (o.tenant_id, o.kind, o.status, o.finished_at, -1),
                       (n.tenant_id, n.kind, n.status, n.finished_at, 1)
            ) AS side (tenant_id, kind, status, finished_at, delta)
            WHERE o.status IS DISTINCT FROM n.status
               OR o.finished_at IS DISTINCT FROM n.finished_at
               OR o.tenant_id IS DISTINCT FROM n.tenant_id
               OR o.kind IS DISTINCT FROM n.kind
        ) AS changed
        GROUP BY 1, 2, 3, 4
        HAVING sum(delta) <> 0;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_counts_track_statement();
CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_counts_track_statement();
CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION job_counts_track_statement();

-- A job's end wakes a job parked at a cap (see `wake_parked` in the
-- priorities migration) only when its tenant has one: the look costs two
-- probes of the parked jobs' indexes, the wake an UPDATE and an INSERT.
CREATE OR REPLACE FUNCTION wake_parked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobs p
                   WHERE p.tenant_id = OLD.tenant_id AND p.capped = 'tenant'
                     AND p.status = 'QUEUED')
       AND NOT EXISTS (SELECT 1 FROM jobs p
                       WHERE p.tenant_id = OLD.tenant_id AND p.kind = OLD.kind
                         AND p.capped = 'kind' AND p.status = 'QUEUED') THEN
        RETURN NULL;
    END IF;
    WITH woken AS (
        UPDATE jobs SET capped = NULL
        WHERE job_id = ANY (ARRAY[
            (SELECT p.job_id FROM jobs p
             WHERE p.tenant_id = OLD.tenant_id AND p.capped = 'tenant' AND p.status = 'QUEUED'
             ORDER BY p.rank_at, p.job_id LIMIT 1 FOR UPDATE SKIP LOCKED),
            (SELECT p.job_id FROM jobs p
             WHERE p.tenant_id = OLD.tenant_id AND p.kind = OLD.kind AND p.capped = 'kind'
               AND p.status = 'QUEUED'
             ORDER BY p.rank_at, p.job_id LIMIT 1 FOR UPDATE SKIP LOCKED)])
        RETURNING job_id, rank_at
    )
    INSERT INTO outbox (job_id, publish_at, rank_at, republish_ms)
    SELECT job_id, to_timestamp(0), rank_at, 0 FROM woken
    ON CONFLICT (job_id) DO UPDATE SET publish_at = excluded.publish_at, republish_ms = 0;
    RETURN NULL;
END
$$;
