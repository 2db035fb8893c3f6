-- Priorities and concurrency caps (`docs/design.md`, Priorities and
-- Concurrency caps).
--
-- `rank_at` orders a tenant's due jobs: the time the job became due plus
-- what its priority is worth (`PRIORITY_AGING` per step below `high`), so a
-- job of lower priority waits behind higher ones for a bounded time only.
-- It moves with `run_after` (a retry ranks from its backoff's end, keeping
-- its priority's offset). Jobs queued or running before this migration rank
-- at their due time.
--
-- `capped` marks a job parked at a concurrency cap: QUEUED, without an
-- outbox row, until a running job of its tenant ends (the trigger below)
-- or a sweeper finds its tenant below the cap.
ALTER TABLE jobs
    ADD COLUMN priority text NOT NULL DEFAULT 'normal'
        CONSTRAINT jobs_priority CHECK (priority IN ('high', 'normal', 'low')),
    ADD COLUMN rank_at timestamptz,
    ADD COLUMN capped text CONSTRAINT jobs_capped CHECK (capped IN ('tenant', 'kind'));
UPDATE jobs SET rank_at = run_after WHERE status IN ('QUEUED', 'RUNNING');

CREATE INDEX jobs_parked_at_tenant_cap ON jobs (tenant_id, rank_at, job_id)
    WHERE capped = 'tenant' AND status = 'QUEUED';
CREATE INDEX jobs_parked_at_kind_cap ON jobs (tenant_id, kind, rank_at, job_id)
    WHERE capped = 'kind' AND status = 'QUEUED';

ALTER TABLE schedules
    ADD COLUMN priority text NOT NULL DEFAULT 'normal'
        CONSTRAINT schedules_priority CHECK (priority IN ('high', 'normal', 'low'));

-- The outbox leases rows not yet published in rank order (so a backlog
-- that waits in the outbox honours priorities), and published rows whose
-- lease lapsed in publish order; whether any row is due at all is asked of
-- the rows' publish times, published or not.
ALTER TABLE outbox ADD COLUMN rank_at timestamptz NOT NULL DEFAULT to_timestamp(0);
UPDATE outbox SET rank_at = publish_at;
CREATE INDEX outbox_ready ON outbox (rank_at) WHERE republish_ms = 0;
CREATE INDEX outbox_waiting ON outbox (publish_at) WHERE republish_ms = 0;
CREATE INDEX outbox_lapsing ON outbox (publish_at) WHERE republish_ms > 0;
DROP INDEX outbox_due;

-- A job that stops running wakes the first job of its tenant parked at the
-- tenant's cap, and the first parked at the cap of its kind: their outbox
-- rows are due at once. A woken job that finds the cap full again (another
-- job took the place first) is parked again by its claim. A wake missed
-- (a claim parking a job while the job that frees its place commits) is
-- made good by the sweeper (`Store::wake_parked`).
CREATE FUNCTION wake_parked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
CREATE TRIGGER jobs_wake_parked AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (OLD.status = 'RUNNING' AND NEW.status <> 'RUNNING')
    EXECUTE FUNCTION wake_parked();

-- The claim of a batch of jobs (`Store::claim_attempts`). Without caps
-- (`tenant_cap` 0, no `capped_kinds`) as before. With caps, the claims of
-- one tenant take turns on an advisory lock (taken in tenant order, so two
-- claims never wait on each other's), and each job, in rank order, is
-- claimed only while its tenant runs fewer than `tenant_cap` jobs and
-- fewer of its kind than that kind's cap; otherwise it is parked
-- (`capped`) and its outbox row goes: the running count it reads is the
-- count it leaves, however many workers claim at once.
DROP FUNCTION claim_jobs(TEXT[], timestamptz, timestamptz, TEXT);
CREATE FUNCTION claim_jobs(
    ids TEXT[], now_at timestamptz, lease_until timestamptz, worker TEXT,
    tenant_cap BIGINT, capped_kinds TEXT[], kind_caps BIGINT[]
)
RETURNS TABLE (
    job_id TEXT, tenant_id TEXT, kind TEXT, params jsonb, attempts BIGINT, handbacks BIGINT,
    max_attempts BIGINT
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
        FOR job_id, tenant_id, kind, params, attempts, handbacks, max_attempts IN
            UPDATE jobs AS j
            SET status = 'RUNNING', attempts = j.attempts + 1, capped = NULL,
                started_at = COALESCE(j.started_at, now_at), lease_expires_at = lease_until,
                worker_id = worker
            WHERE j.job_id = ANY (ids) AND j.status = 'QUEUED' AND j.run_after <= now_at
            RETURNING j.job_id, j.tenant_id, j.kind, j.params, j.attempts, j.handbacks,
                      j.max_attempts
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
                      j.max_attempts
            INTO job_id, tenant_id, kind, params, attempts, handbacks, max_attempts;
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
