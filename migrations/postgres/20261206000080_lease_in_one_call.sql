-- A lease of external jobs in one call, so in one round trip and one
-- transaction of its own: the claim (`claim_jobs`, which parks a job over
-- a cap) of the tenant's due jobs of the kinds named, by rank, skipping
-- those another lease is taking; each claimed attempt's deadline (its
-- kind's timeout from now, the lease ending no later); and the worker's
-- row, seen now. The kinds' timeouts and caps are the caller's, read from
-- the registered kinds before. Answers the attempts in rank order.
-- Only added: an api of the release before leases as it did.
CREATE FUNCTION lease_jobs(
    tenant TEXT, kind_names TEXT[], kind_timeouts_ms BIGINT[], most BIGINT,
    now_at timestamptz, rank_before timestamptz, lease_until timestamptz, worker TEXT,
    worker_name TEXT, tenant_cap BIGINT, capped_kinds TEXT[], kind_caps BIGINT[],
    note_seen BOOLEAN
)
RETURNS TABLE (
    job_id TEXT, tenant_id TEXT, kind TEXT, params jsonb, attempts BIGINT, handbacks BIGINT,
    max_attempts BIGINT, created_at timestamptz, traceparent TEXT, priority TEXT,
    lease_expires_at timestamptz, attempt_deadline timestamptz
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    claimed TEXT[];
BEGIN
    SELECT coalesce(array_agg(c.job_id), '{}') INTO claimed
    FROM claim_jobs(ARRAY(
        SELECT d.job_id FROM unnest(kind_names) AS k (name) CROSS JOIN LATERAL (
            SELECT j.job_id, j.rank_at FROM jobs j
            WHERE j.status = 'QUEUED' AND j.capped IS NULL AND j.external
              AND j.tenant_id = tenant AND j.kind = k.name
              AND j.rank_at <= rank_before AND j.run_after <= now_at
            ORDER BY j.rank_at, j.job_id LIMIT most
            FOR UPDATE SKIP LOCKED
        ) AS d
        ORDER BY d.rank_at, d.job_id LIMIT most
    ), now_at, lease_until, worker, tenant_cap, capped_kinds, kind_caps, true) AS c;
    IF note_seen OR cardinality(claimed) > 0 THEN
        INSERT INTO workers AS w (tenant_id, name, kinds, first_seen_at, last_seen_at, leased)
        VALUES (tenant, worker_name, to_jsonb(kind_names), now_at, now_at, cardinality(claimed))
        ON CONFLICT (tenant_id, name) DO UPDATE SET kinds = excluded.kinds,
            last_seen_at = excluded.last_seen_at, leased = w.leased + excluded.leased;
    END IF;
    IF cardinality(claimed) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH given AS (
        UPDATE jobs AS j
        SET attempt_deadline = now_at + t.timeout_ms * interval '1 millisecond',
            lease_taken_up = false,
            lease_expires_at = LEAST(j.lease_expires_at,
                                     now_at + t.timeout_ms * interval '1 millisecond')
        FROM unnest(kind_names, kind_timeouts_ms) AS t (name, timeout_ms)
        WHERE j.job_id = ANY (claimed) AND j.kind = t.name
        RETURNING j.job_id, j.tenant_id, j.kind, j.params, j.attempts, j.handbacks,
                  j.max_attempts, j.created_at, j.traceparent, j.priority,
                  j.lease_expires_at, j.attempt_deadline
    )
    SELECT g.job_id, g.tenant_id, g.kind, g.params, g.attempts, g.handbacks, g.max_attempts,
           g.created_at, g.traceparent, g.priority, g.lease_expires_at, g.attempt_deadline
    FROM given g ORDER BY array_position(claimed, g.job_id);
END
$$;
