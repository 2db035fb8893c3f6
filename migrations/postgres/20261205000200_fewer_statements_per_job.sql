-- Fewer statements per job where the job rows are the queue: a claim is
-- one statement, a job's end runs one statement in its trigger, and a
-- result is stored without a foreign-key check
-- (`docs/performance.md`, Postgres's work per job).

-- A result is stored only by the statement that ends its job's attempt,
-- joined to the job rows that statement updated, and retention deletes a
-- job's result with it: the foreign key checked, per result, what those
-- statements already hold.
ALTER TABLE job_results DROP CONSTRAINT job_results_job_id_fkey;

-- Whether a tenant has a claimable job that is due, as a one-row table so
-- that the planner inlines it into the claim (a scalar SQL function with a
-- subquery is run as a statement of its own, once per tenant walked). The
-- tenant's first claimable job by rank, not EXISTS: inlined, an EXISTS can
-- become a join that reads every queued job of every tenant, where the
-- first by rank is one probe of `jobs_claimable`, bounded by `rank_before`.
CREATE FUNCTION tenant_due(tenant TEXT, now_at timestamptz, rank_before timestamptz)
RETURNS TABLE (due boolean) LANGUAGE sql STABLE AS $$
    SELECT (SELECT d.rank_at FROM jobs d
            WHERE d.status = 'QUEUED' AND d.capped IS NULL AND d.tenant_id COLLATE "C" = tenant
              AND d.rank_at <= rank_before AND d.run_after <= now_at
            ORDER BY d.rank_at LIMIT 1) IS NOT NULL
$$;

-- The claim of up to `most` due jobs (`Store::claim_due`), as before: the
-- tenants with a due job in turn, starting after `after_tenant` and
-- wrapping around, each tenant's first by rank, as evenly as `most`
-- allows. Without caps the walk and the claim are one statement. With
-- caps the walk hands the jobs it chose to `claim_jobs`, which claims or
-- parks each in rank order. Either way the claimed jobs come back in the
-- order the walk took them, as on SQLite.
--
-- Its plans are generic, made once per session: Postgres would otherwise
-- plan the walk afresh at every call, as its estimate of the generic plan
-- is no better than a custom one's, and planning the walk costs many times
-- what running it does for a claim of a few jobs.
CREATE OR REPLACE FUNCTION claim_due_jobs(
    most BIGINT, after_tenant TEXT, now_at timestamptz, rank_before timestamptz,
    lease_until timestamptz, worker TEXT, tenant_cap BIGINT, capped_kinds TEXT[],
    kind_caps BIGINT[]
)
RETURNS TABLE (
    job_id TEXT, tenant_id TEXT, kind TEXT, params jsonb, attempts BIGINT, handbacks BIGINT,
    max_attempts BIGINT, created_at timestamptz, traceparent TEXT
) LANGUAGE plpgsql SET enable_seqscan = off SET jit = off
  SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
    uncapped CONSTANT BOOLEAN := tenant_cap = 0 AND cardinality(capped_kinds) = 0;
    for_caps TEXT[] := '{}';
    taken RECORD;
BEGIN
    FOR taken IN
        WITH RECURSIVE after_cursor (tenant_id, turn, due_before) AS (
            SELECT min(j.tenant_id COLLATE "C"), 1::bigint, 0::bigint FROM jobs j
            WHERE j.status = 'QUEUED' AND j.capped IS NULL
              AND j.tenant_id COLLATE "C" > after_tenant
          UNION ALL
            SELECT (SELECT min(j.tenant_id COLLATE "C") FROM jobs j
                    WHERE j.status = 'QUEUED' AND j.capped IS NULL
                      AND j.tenant_id COLLATE "C" > t.tenant_id),
                   t.turn + 1,
                   t.due_before + p.due::int
            FROM after_cursor t CROSS JOIN LATERAL tenant_due(t.tenant_id, now_at, rank_before) p
            WHERE t.tenant_id IS NOT NULL AND t.due_before < most
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
                   t.due_before + p.due::int
            FROM from_start t CROSS JOIN LATERAL tenant_due(t.tenant_id, now_at, rank_before) p
            WHERE t.tenant_id IS NOT NULL AND t.due_before < most
        ), tenants AS (
            SELECT both_sides.tenant_id, both_sides.turn FROM (
                SELECT tenant_id, turn FROM after_cursor WHERE tenant_id IS NOT NULL
                UNION ALL
                SELECT tenant_id, turn + (SELECT max(turn) FROM after_cursor) FROM from_start
                WHERE tenant_id IS NOT NULL
            ) AS both_sides
            CROSS JOIN LATERAL tenant_due(both_sides.tenant_id, now_at, rank_before) p
            WHERE p.due
            ORDER BY both_sides.turn LIMIT most
        ), per_tenant AS (
            SELECT GREATEST(1, ceil(most::float8 / GREATEST(1, count(*))))::bigint AS share
            FROM tenants
        ), candidates AS (
            SELECT c.job_id, t.turn,
                   row_number() OVER (PARTITION BY t.turn ORDER BY c.rank_at, c.job_id) AS n
            FROM tenants t CROSS JOIN per_tenant s CROSS JOIN LATERAL (
                SELECT j.job_id, j.rank_at FROM jobs j
                WHERE j.status = 'QUEUED' AND j.capped IS NULL
                  AND j.tenant_id COLLATE "C" = t.tenant_id
                  AND j.rank_at <= rank_before AND j.run_after <= now_at
                ORDER BY j.rank_at, j.job_id LIMIT s.share
                FOR UPDATE SKIP LOCKED
            ) AS c
        ), chosen AS (
            SELECT c.job_id, row_number() OVER (ORDER BY c.n, c.turn) AS place
            FROM candidates c ORDER BY c.n, c.turn LIMIT most
        ), claimed AS (
            -- Requiring QUEUED and due is the guard, as in `claim_jobs`.
            -- The chosen ids as an array, so that only `jobs_pkey` serves
            -- them: as a join, a plan could read every job's key.
            UPDATE jobs AS j
            SET status = 'RUNNING', attempts = j.attempts + 1, capped = NULL,
                started_at = COALESCE(j.started_at, now_at), lease_expires_at = lease_until,
                worker_id = worker
            WHERE uncapped AND j.job_id = ANY (ARRAY(SELECT ch.job_id FROM chosen ch))
              AND CASE WHEN j.status = 'QUEUED' AND j.run_after <= now_at THEN true ELSE false END
            RETURNING j.job_id, j.tenant_id, j.kind, j.params, j.attempts, j.handbacks,
                      j.max_attempts, j.created_at, j.traceparent
        )
        SELECT ch.place, ch.job_id AS chosen_id, c.job_id AS claimed_id, c.tenant_id AS c_tenant,
               c.kind AS c_kind, c.params AS c_params, c.attempts AS c_attempts,
               c.handbacks AS c_handbacks, c.max_attempts AS c_max_attempts,
               c.created_at AS c_created_at, c.traceparent AS c_traceparent
        FROM chosen ch LEFT JOIN claimed c ON c.job_id = ch.job_id
        ORDER BY ch.place
    LOOP
        IF NOT uncapped THEN
            for_caps := for_caps || taken.chosen_id;
        ELSIF taken.claimed_id IS NOT NULL THEN
            job_id := taken.claimed_id;
            tenant_id := taken.c_tenant;
            kind := taken.c_kind;
            params := taken.c_params;
            attempts := taken.c_attempts;
            handbacks := taken.c_handbacks;
            max_attempts := taken.c_max_attempts;
            created_at := taken.c_created_at;
            traceparent := taken.c_traceparent;
            RETURN NEXT;
        END IF;
    END LOOP;
    IF cardinality(for_caps) > 0 THEN
        RETURN QUERY
        SELECT c.job_id, c.tenant_id, c.kind, c.params, c.attempts, c.handbacks, c.max_attempts,
               c.created_at, c.traceparent
        FROM claim_jobs(for_caps, now_at, lease_until, worker, tenant_cap, capped_kinds, kind_caps) c
        ORDER BY array_position(for_caps, c.job_id);
    END IF;
END
$$;
DROP FUNCTION claimable_due(TEXT, timestamptz, timestamptz);

-- An UPDATE of jobs runs one trigger, whose first statement both appends
-- the job counters' deltas and asks whether a job that left RUNNING may
-- wake a job parked at a cap (one probe of each parked index, made only
-- when some job left RUNNING); the two triggers it replaces ran a
-- statement each on every UPDATE. The counters' deltas and the wake mean
-- what they did (the migrations `job_triggers_per_statement` and
-- `wake_parked_per_statement`).
DROP TRIGGER job_counts_update ON jobs;
DROP TRIGGER jobs_wake_parked ON jobs;
DROP FUNCTION wake_parked_statement();

CREATE FUNCTION jobs_updated_statement() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    may_wake BOOLEAN;
    ended RECORD;
    woken_ids TEXT[];
    woken_due timestamptz[];
    woken_ranks timestamptz[];
BEGIN
    WITH counted AS (
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
        HAVING sum(delta) <> 0
    )
    SELECT EXISTS (SELECT 1 FROM old_rows o JOIN new_rows n ON n.job_id = o.job_id
                   WHERE o.status = 'RUNNING' AND n.status <> 'RUNNING')
           AND (EXISTS (SELECT 1 FROM jobs p WHERE p.capped = 'tenant' AND p.status = 'QUEUED')
                OR EXISTS (SELECT 1 FROM jobs p WHERE p.capped = 'kind' AND p.status = 'QUEUED'))
    INTO may_wake;
    IF NOT may_wake THEN
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
CREATE TRIGGER jobs_updated AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_updated_statement();

-- The queue gauges' index names `kind` in its predicate, which the claim's
-- walk never does, so that no plan of the walk can read it. Both serve
-- the queued jobs; with statistics taken while nothing waited, Postgres
-- counted them equally cheap and took the gauges' index, which gives the
-- walk's probes no order by tenant and rank: each read the backlog whole.
-- The gauges name a kind or say `kind IS NOT NULL`.
DROP INDEX jobs_queued_by_kind;
CREATE INDEX jobs_queued_by_kind ON jobs (kind, run_after)
    WHERE status = 'QUEUED' AND kind IS NOT NULL;
