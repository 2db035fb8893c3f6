-- A claim finds its jobs by key, whatever the statistics say. The queue
-- gauges' partial index `jobs_queued_by_kind` (WHERE status = 'QUEUED')
-- matched the claim's own guard, and statistics taken while few jobs were
-- queued (the usual state, kept for long on a large table) made Postgres
-- read that index whole, the backlog's every entry, on each claim rather
-- than probe the primary key: the slower the claims, the bigger the
-- backlog, the slower the claims. Written as CASE, the guards still fence
-- (QUEUED, due) but imply no index predicate, so only `jobs_pkey` serves
-- `job_id = ANY (ids)`.
CREATE OR REPLACE FUNCTION claim_jobs(
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
            WHERE j.job_id = ANY (ids)
              AND CASE WHEN j.status = 'QUEUED' AND j.run_after <= now_at THEN true ELSE false END
            RETURNING j.job_id, j.tenant_id, j.kind, j.params, j.attempts, j.handbacks,
                      j.max_attempts, j.created_at, j.traceparent
        LOOP
            done := done || job_id;
            RETURN NEXT;
        END LOOP;
    ELSE
        FOR candidate IN
            SELECT DISTINCT j.tenant_id FROM jobs j
            WHERE j.job_id = ANY (ids)
              AND CASE WHEN j.status = 'QUEUED' THEN true ELSE false END
            ORDER BY j.tenant_id
        LOOP
            PERFORM pg_advisory_xact_lock(hashtextextended('receipt.cap:' || candidate.tenant_id, 0));
        END LOOP;
        FOR candidate IN
            SELECT j.job_id, j.tenant_id, j.kind FROM jobs j
            WHERE j.job_id = ANY (ids)
              AND CASE WHEN j.status = 'QUEUED' AND j.run_after <= now_at THEN true ELSE false END
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
                WHERE jobs.job_id = candidate.job_id
                  AND CASE WHEN jobs.status = 'QUEUED' THEN true ELSE false END;
                done := done || candidate.job_id;
                CONTINUE;
            END IF;
            UPDATE jobs AS j
            SET status = 'RUNNING', attempts = j.attempts + 1, capped = NULL,
                started_at = COALESCE(j.started_at, now_at), lease_expires_at = lease_until,
                worker_id = worker
            WHERE j.job_id = candidate.job_id
              AND CASE WHEN j.status = 'QUEUED' THEN true ELSE false END
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
