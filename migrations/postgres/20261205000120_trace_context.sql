-- Traces: each job keeps the W3C `traceparent` of the request that made
-- it (NULL when nothing was traced, and for a schedule's fire, whose
-- attempts start traces of their own), written with the job and read back
-- by the claim, so that every attempt joins the job's trace without a
-- statement of its own; each webhook event keeps the one of the write
-- that made it, so that its deliveries join the trace of that write.
-- Columns without a default: adding them rewrites nothing.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
ALTER TABLE webhook_events ADD COLUMN traceparent TEXT;

-- The claim returns the job's trace context, and when the job was made
-- (an attempt long after its submit starts a trace of its own, linked to
-- the submit's: docs/observability.md). Otherwise as before.
DROP FUNCTION claim_jobs(TEXT[], timestamptz, timestamptz, TEXT, BIGINT, TEXT[], BIGINT[]);
CREATE FUNCTION claim_jobs(
    ids TEXT[], now_at timestamptz, lease_until timestamptz, worker TEXT,
    tenant_cap BIGINT, capped_kinds TEXT[], kind_caps BIGINT[]
)
RETURNS TABLE (
    job_id TEXT, tenant_id TEXT, kind TEXT, params jsonb, attempts BIGINT, handbacks BIGINT,
    max_attempts BIGINT, created_at timestamptz, traceparent TEXT
) LANGUAGE plpgsql AS $$
DECLARE
    done TEXT[] := '{}';
    candidate RECORD;
    kind_cap BIGINT;
    park TEXT;
BEGIN
    IF tenant_cap = 0 AND cardinality(capped_kinds) = 0 THEN
        -- Requiring QUEUED is the guard: of two deliveries of one job, in
        -- one batch or in two processes, one finds it running.
        FOR job_id, tenant_id, kind, params, attempts, handbacks, max_attempts, created_at,
            traceparent IN
            UPDATE jobs AS j
            SET status = 'RUNNING', attempts = j.attempts + 1, capped = NULL,
                started_at = COALESCE(j.started_at, now_at), lease_expires_at = lease_until,
                worker_id = worker
            WHERE j.job_id = ANY (ids) AND j.status = 'QUEUED' AND j.run_after <= now_at
            RETURNING j.job_id, j.tenant_id, j.kind, j.params, j.attempts, j.handbacks,
                      j.max_attempts, j.created_at, j.traceparent
        LOOP
            done := done || job_id;
            RETURN NEXT;
        END LOOP;
    ELSE
        FOR candidate IN
            SELECT DISTINCT j.tenant_id FROM jobs j
            WHERE j.job_id = ANY (ids) AND j.status = 'QUEUED' ORDER BY j.tenant_id
        LOOP
            PERFORM pg_advisory_xact_lock(hashtextextended('receipt.cap:' || candidate.tenant_id, 0));
        END LOOP;
        FOR candidate IN
            SELECT j.job_id, j.tenant_id, j.kind FROM jobs j
            WHERE j.job_id = ANY (ids) AND j.status = 'QUEUED' AND j.run_after <= now_at
            ORDER BY j.rank_at, j.job_id
        LOOP
            kind_cap := (SELECT c.cap FROM unnest(capped_kinds, kind_caps) AS c (kind, cap)
                         WHERE c.kind = candidate.kind);
            park := NULL;
            IF tenant_cap > 0 AND (SELECT count(*) FROM jobs r
                                   WHERE r.tenant_id = candidate.tenant_id
                                     AND r.status = 'RUNNING') >= tenant_cap THEN
                park := 'tenant';
            ELSIF kind_cap IS NOT NULL AND (SELECT count(*) FROM jobs r
                                            WHERE r.tenant_id = candidate.tenant_id
                                              AND r.status = 'RUNNING'
                                              AND r.kind = candidate.kind) >= kind_cap THEN
                park := 'kind';
            END IF;
            IF park IS NOT NULL THEN
                UPDATE jobs SET capped = park
                WHERE jobs.job_id = candidate.job_id AND jobs.status = 'QUEUED';
                done := done || candidate.job_id;
                CONTINUE;
            END IF;
            UPDATE jobs AS j
            SET status = 'RUNNING', attempts = j.attempts + 1, capped = NULL,
                started_at = COALESCE(j.started_at, now_at), lease_expires_at = lease_until,
                worker_id = worker
            WHERE j.job_id = candidate.job_id AND j.status = 'QUEUED'
            RETURNING j.job_id, j.tenant_id, j.kind, j.params, j.attempts, j.handbacks,
                      j.max_attempts, j.created_at, j.traceparent
            INTO job_id, tenant_id, kind, params, attempts, handbacks, max_attempts, created_at,
                 traceparent;
            IF FOUND THEN
                done := done || job_id;
                RETURN NEXT;
            END IF;
        END LOOP;
    END IF;
    IF cardinality(done) > 0 THEN
        EXECUTE 'DELETE FROM outbox WHERE job_id = ANY ($1)' USING done;
    END IF;
END
$$;
