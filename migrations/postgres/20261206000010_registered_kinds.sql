-- Report kinds a tenant registers, run by its own workers over HTTP
-- (`docs/workers.md`). Their jobs are rows of `jobs` like any other, marked
-- `external`: the built-in workers' claims never take them, and a worker's
-- lease takes only them.

CREATE TABLE registered_kinds (
    tenant_id          TEXT NOT NULL,
    name               TEXT NOT NULL,
    about              TEXT NOT NULL,
    params_schema      jsonb NOT NULL,      -- JSON Schema 2020-12 of a submit's body
    timeout_ms         BIGINT NOT NULL CHECK (timeout_ms > 0),
    max_attempts       BIGINT NOT NULL CHECK (max_attempts > 0),
    result_media_types jsonb NOT NULL,      -- the media types a result may have
    max_running        BIGINT CHECK (max_running > 0), -- the tenant's cap on running jobs of the kind
    priority           TEXT NOT NULL CHECK (priority IN ('high', 'normal', 'low')),
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    deleted_at         timestamptz,          -- deleted: refused at submit, its jobs still leased
    PRIMARY KEY (tenant_id, name)
);

-- A constant default: no table rewrite. `attempt_deadline` is when the
-- running attempt of an external job must end (its kind's timeout from its
-- lease); a heartbeat never extends the lease past it.
ALTER TABLE jobs ADD COLUMN external BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN attempt_deadline timestamptz;

-- Which API keys may do what: NULL is every right a key had before scopes
-- (everything but `work`); `work` keys lease and report attempts, of the
-- kinds in `kinds` (NULL: every kind of their tenant).
ALTER TABLE api_keys ADD COLUMN scopes TEXT;
ALTER TABLE api_keys ADD COLUMN kinds TEXT;

-- Workers' streamed results may be any media type: their chunks hold bytes.
ALTER TABLE job_result_chunks ADD COLUMN data BYTEA;
ALTER TABLE job_result_chunks ADD COLUMN media_type TEXT;

-- The built-in claim's index leaves external jobs out; a lease reads its
-- own, by tenant and kind.
DROP INDEX jobs_claimable;
CREATE INDEX jobs_claimable ON jobs ((tenant_id COLLATE "C"), rank_at, job_id)
    WHERE status = 'QUEUED' AND capped IS NULL AND NOT external;
CREATE INDEX jobs_leasable ON jobs (tenant_id, kind, rank_at, job_id)
    WHERE status = 'QUEUED' AND capped IS NULL AND external;


-- Jobs made due again (a retry, a lapsed lease, a wake from a cap) are
-- announced on `receipt_queue`, which the workers that claim from the job
-- rows and the leases of external workers both wait on. Where Redis is the
-- queue, the built-in kinds' jobs also get their outbox row; a registered
-- kind's job is leased from its row, never sent to Redis.
CREATE OR REPLACE FUNCTION queue_jobs(ids TEXT[], due_at timestamptz[], ranks timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(ids) IS NULL OR cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM queue_in_job_rows) THEN
        INSERT INTO outbox (job_id, publish_at, rank_at, republish_ms)
        SELECT q.job_id, q.due, q.rank_at, 0
        FROM unnest(ids, due_at, ranks) AS q (job_id, due, rank_at)
        WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = q.job_id AND j.external)
        ON CONFLICT (job_id) DO UPDATE SET publish_at = excluded.publish_at,
            rank_at = excluded.rank_at, republish_ms = 0;
        IF NOT EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = ANY (ids) AND j.external) THEN
            RETURN;
        END IF;
    END IF;
    PERFORM pg_notify('receipt_queue', (SELECT
        floor(extract(epoch FROM min(d)) * 1000)::bigint::text FROM unnest(due_at) AS d));
END
$$;

-- The claims of the built-in workers take no external job, and a lease
-- takes only those (`of_external`); one function still decides caps for
-- both.
DROP FUNCTION claim_jobs(TEXT[], timestamptz, timestamptz, TEXT, BIGINT, TEXT[], BIGINT[]);
CREATE FUNCTION claim_jobs(
    ids TEXT[], now_at timestamptz, lease_until timestamptz, worker TEXT, tenant_cap BIGINT,
    capped_kinds TEXT[], kind_caps BIGINT[], of_external BOOLEAN DEFAULT false
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
              AND CASE WHEN j.status = 'QUEUED' AND j.run_after <= now_at
                            AND j.external = of_external THEN true ELSE false END
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
              AND CASE WHEN j.status = 'QUEUED' AND j.external = of_external THEN true ELSE false END
            ORDER BY j.tenant_id
        LOOP
            PERFORM pg_advisory_xact_lock(hashtextextended('receipt.cap:' || candidate.tenant_id, 0));
        END LOOP;
        FOR candidate IN
            SELECT j.job_id, j.tenant_id, j.kind FROM jobs j
            WHERE j.job_id = ANY (ids)
              AND CASE WHEN j.status = 'QUEUED' AND j.run_after <= now_at
                            AND j.external = of_external THEN true ELSE false END
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
              AND CASE WHEN j.status = 'QUEUED' AND j.external = of_external THEN true ELSE false END
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


-- The walk of the built-in claim leaves external jobs out, as its index does.
CREATE OR REPLACE FUNCTION tenant_due(tenant TEXT, now_at timestamptz, rank_before timestamptz)
RETURNS TABLE (due boolean) LANGUAGE sql STABLE AS $$
    SELECT (SELECT d.rank_at FROM jobs d
            WHERE d.status = 'QUEUED' AND d.capped IS NULL AND NOT d.external AND d.tenant_id COLLATE "C" = tenant
              AND d.rank_at <= rank_before AND d.run_after <= now_at
            ORDER BY d.rank_at LIMIT 1) IS NOT NULL
$$;

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
            WHERE j.status = 'QUEUED' AND j.capped IS NULL AND NOT j.external
              AND j.tenant_id COLLATE "C" > after_tenant
          UNION ALL
            SELECT (SELECT min(j.tenant_id COLLATE "C") FROM jobs j
                    WHERE j.status = 'QUEUED' AND j.capped IS NULL AND NOT j.external
                      AND j.tenant_id COLLATE "C" > t.tenant_id),
                   t.turn + 1,
                   t.due_before + p.due::int
            FROM after_cursor t CROSS JOIN LATERAL tenant_due(t.tenant_id, now_at, rank_before) p
            WHERE t.tenant_id IS NOT NULL AND t.due_before < most
        ), from_start (tenant_id, turn, due_before) AS (
            SELECT min(j.tenant_id COLLATE "C"), 1::bigint, 0::bigint FROM jobs j
            WHERE j.status = 'QUEUED' AND j.capped IS NULL AND NOT j.external
              AND j.tenant_id COLLATE "C" <= after_tenant
          UNION ALL
            SELECT (SELECT min(j.tenant_id COLLATE "C") FROM jobs j
                    WHERE j.status = 'QUEUED' AND j.capped IS NULL AND NOT j.external
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
                WHERE j.status = 'QUEUED' AND j.capped IS NULL AND NOT j.external
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
