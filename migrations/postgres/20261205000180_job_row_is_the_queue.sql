-- The job row is the queue of the shape without Redis (`docs/design.md`,
-- The job row is the queue). A worker claims due jobs straight from
-- `jobs`: no message, no consumer, no heartbeat beside the job's lease.
-- Jobs waiting in the queue this replaces are QUEUED rows, claimable as
-- they are; its messages in flight belonged to jobs that are RUNNING under
-- a lease, or that the sweeper hands back when their lease lapses.
DROP FUNCTION queue_fetch(TEXT, TEXT, BIGINT, TEXT, BIGINT[], BIGINT);
DROP TABLE queue_messages;
DROP TABLE queue_consumers;

-- The claimable jobs, by tenant and rank: a claim walks the tenants with
-- one probe each, and takes each tenant's first due jobs by rank. A job
-- parked at a cap is not claimable until it is woken. Tenants are walked
-- in byte order ("C"), the order in which a worker keeps its place.
CREATE INDEX jobs_claimable ON jobs ((tenant_id COLLATE "C"), rank_at, job_id)
    WHERE status = 'QUEUED' AND capped IS NULL;

-- Whether a tenant has a claimable job that is due: one probe of
-- `jobs_claimable`, bounded to the jobs that are or soon become due.
CREATE FUNCTION claimable_due(tenant TEXT, now_at timestamptz, rank_before timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM jobs d
        WHERE d.status = 'QUEUED' AND d.capped IS NULL AND d.tenant_id COLLATE "C" = tenant
          AND d.rank_at <= rank_before AND d.run_after <= now_at)
$$;

-- The claim of up to `most` due jobs (`Store::claim_due`): the tenants
-- with a due job in turn, starting after `after_tenant` and wrapping
-- around, each tenant's first by rank, as evenly as `most` allows, then
-- `claim_jobs` on them (caps, parking, the lease). A job is due when its
-- `run_after` has passed; its `rank_at` is at most `rank_before` (its due
-- time plus its priority's offset, at most two steps of aging), which
-- bounds each tenant's probe to the jobs that are or soon become due.
-- Rows another claim is taking are skipped, not waited for. As for the
-- queue's fetch before it, plans are made with sequential scans priced out,
-- so a plan cached while few jobs waited serves a backlog as well.
CREATE FUNCTION claim_due_jobs(
    most BIGINT, after_tenant TEXT, now_at timestamptz, rank_before timestamptz,
    lease_until timestamptz, worker TEXT, tenant_cap BIGINT, capped_kinds TEXT[],
    kind_caps BIGINT[]
)
RETURNS TABLE (
    job_id TEXT, tenant_id TEXT, kind TEXT, params jsonb, attempts BIGINT, handbacks BIGINT,
    max_attempts BIGINT, created_at timestamptz, traceparent TEXT
) LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
#variable_conflict use_column
DECLARE
    chosen TEXT[];
BEGIN
    chosen := ARRAY(
        WITH RECURSIVE after_cursor (tenant_id, turn, due_before) AS (
            SELECT min(j.tenant_id COLLATE "C"), 1::bigint, 0::bigint FROM jobs j
            WHERE j.status = 'QUEUED' AND j.capped IS NULL
              AND j.tenant_id COLLATE "C" > after_tenant
          UNION ALL
            SELECT (SELECT min(j.tenant_id COLLATE "C") FROM jobs j
                    WHERE j.status = 'QUEUED' AND j.capped IS NULL
                      AND j.tenant_id COLLATE "C" > t.tenant_id),
                   t.turn + 1,
                   t.due_before + CASE WHEN claimable_due(t.tenant_id, now_at, rank_before)
                                       THEN 1 ELSE 0 END
            FROM after_cursor t WHERE t.tenant_id IS NOT NULL AND t.due_before < most
        ), from_start (tenant_id, turn, due_before) AS (
            SELECT min(j.tenant_id COLLATE "C"), 1::bigint, 0::bigint FROM jobs j
            WHERE j.status = 'QUEUED' AND j.capped IS NULL
              AND j.tenant_id COLLATE "C" <= after_tenant
          UNION ALL
            SELECT (SELECT min(j.tenant_id COLLATE "C") FROM jobs j
                    WHERE j.status = 'QUEUED' AND j.capped IS NULL
                      AND j.tenant_id COLLATE "C" > t.tenant_id
                      AND j.tenant_id COLLATE "C" <= after_tenant),
                   t.turn + 1,
                   t.due_before + CASE WHEN claimable_due(t.tenant_id, now_at, rank_before)
                                       THEN 1 ELSE 0 END
            FROM from_start t WHERE t.tenant_id IS NOT NULL AND t.due_before < most
        ), tenants AS (
            SELECT tenant_id, turn FROM (
                SELECT tenant_id, turn FROM after_cursor WHERE tenant_id IS NOT NULL
                UNION ALL
                SELECT tenant_id, turn + (SELECT max(turn) FROM after_cursor) FROM from_start
                WHERE tenant_id IS NOT NULL
            ) AS both_sides
            WHERE claimable_due(tenant_id, now_at, rank_before)
            ORDER BY turn LIMIT most
        ), per_tenant AS (
            SELECT GREATEST(1, ceil(most::float8 / GREATEST(1, count(*))))::bigint AS share
            FROM tenants
        ), candidates AS (
            SELECT c.job_id, t.turn,
                   row_number() OVER (PARTITION BY t.turn ORDER BY c.rank_at, c.job_id) AS n
            FROM tenants t CROSS JOIN per_tenant p CROSS JOIN LATERAL (
                SELECT j.job_id, j.rank_at FROM jobs j
                WHERE j.status = 'QUEUED' AND j.capped IS NULL
                  AND j.tenant_id COLLATE "C" = t.tenant_id
                  AND j.rank_at <= rank_before AND j.run_after <= now_at
                ORDER BY j.rank_at, j.job_id LIMIT p.share
                FOR UPDATE SKIP LOCKED
            ) AS c
        )
        SELECT job_id FROM candidates ORDER BY n, turn LIMIT most
    );
    IF cardinality(chosen) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT c.job_id, c.tenant_id, c.kind, c.params, c.attempts, c.handbacks, c.max_attempts,
           c.created_at, c.traceparent
    FROM claim_jobs(chosen, now_at, lease_until, worker, tenant_cap, capped_kinds, kind_caps) c;
END
$$;
