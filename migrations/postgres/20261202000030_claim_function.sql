-- The claim of a batch of jobs (`Store::claim_attempts`): each job's next
-- attempt begins, and its outbox row goes, in one call. A function, so that
-- the UPDATE keeps its prepared plan while the DELETE is planned each time
-- for the rows `outbox` holds then (dynamic SQL is never cached): `outbox`
-- is a queue, empty one minute and a backlog the next, and a plan kept from
-- an empty moment reads the whole backlog on every claim.
CREATE FUNCTION claim_jobs(
    ids TEXT[], now_ms BIGINT, lease_until BIGINT, worker TEXT, running TEXT, queued TEXT
) RETURNS TABLE (
    job_id TEXT, tenant_id TEXT, kind TEXT, params TEXT, attempts BIGINT, handbacks BIGINT,
    max_attempts BIGINT
) LANGUAGE plpgsql AS $$
DECLARE
    claimed TEXT[] := '{}';
BEGIN
    -- Requiring `queued` is the guard: of two deliveries of one job, in one
    -- batch or in two processes, one finds it running.
    FOR job_id, tenant_id, kind, params, attempts, handbacks, max_attempts IN
        UPDATE jobs AS j
        SET status = running, attempts = j.attempts + 1,
            started_at = COALESCE(j.started_at, now_ms), lease_expires_at = lease_until,
            worker_id = worker
        WHERE j.job_id = ANY (ids) AND j.status = queued AND j.run_after <= now_ms
        RETURNING j.job_id, j.tenant_id, j.kind, j.params, j.attempts, j.handbacks,
                  j.max_attempts
    LOOP
        claimed := claimed || job_id;
        RETURN NEXT;
    END LOOP;
    IF cardinality(claimed) > 0 THEN
        EXECUTE 'DELETE FROM outbox WHERE job_id = ANY ($1)' USING claimed;
    END IF;
END
$$;
