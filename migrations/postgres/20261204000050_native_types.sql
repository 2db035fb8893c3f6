-- Postgres's own types. Until now the schema was SQLite's (times as BIGINT
-- milliseconds, flags as 0/1, JSON as TEXT, a webhook's events as one
-- comma-joined string), so that one set of queries could serve both
-- databases; each database now has its own statements, and an operator can
-- write `WHERE created_at > now() - interval '1 day'`.
--
-- Times become `timestamptz`, flags `boolean`, JSON documents `jsonb`
-- (a job's parameters, a result, a saga step's output, a stored answer's
-- headers), a webhook's events a `text[]`, a ledger entry's date a `date`.
-- Kept as they were, on purpose: a stored answer's body (`bytea`, replayed
-- byte for byte), a webhook event's body (`text`: the bytes signed and
-- sent, made once when the event is created), a result's chunks (`text`:
-- pieces of a JSON array, not documents), durations in milliseconds (their
-- unit is in their name).
--
-- The upgrade rewrites each table under an exclusive lock: writes wait for
-- it, for a time that grows with the tables (see docs/operations.md).

CREATE FUNCTION pg_temp.ms_to_timestamptz(ms BIGINT) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE AS $$ SELECT to_timestamp(ms / 1000.0) $$;

-- What refers to columns whose type changes is dropped first and made
-- again below.
DROP TRIGGER job_counts_insert ON jobs;
DROP TRIGGER job_counts_update ON jobs;
DROP TRIGGER job_counts_delete ON jobs;
DROP FUNCTION job_counts_track();
DROP FUNCTION claim_jobs(TEXT[], BIGINT, BIGINT, TEXT, TEXT, TEXT);

-- Jobs.
ALTER TABLE jobs
    ALTER COLUMN params TYPE jsonb USING params::jsonb,
    ALTER COLUMN created_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(created_at),
    ALTER COLUMN started_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(started_at),
    ALTER COLUMN finished_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(finished_at),
    ALTER COLUMN run_after TYPE timestamptz USING pg_temp.ms_to_timestamptz(run_after),
    ALTER COLUMN lease_expires_at TYPE timestamptz
        USING pg_temp.ms_to_timestamptz(lease_expires_at),
    ALTER COLUMN cancel_requested DROP DEFAULT,
    ALTER COLUMN cancel_requested TYPE boolean USING cancel_requested <> 0,
    ALTER COLUMN cancel_requested SET DEFAULT false,
    ADD CONSTRAINT jobs_progress_fraction CHECK (progress BETWEEN 0 AND 1),
    ADD CONSTRAINT jobs_attempts_counted CHECK (handbacks BETWEEN 0 AND attempts);

-- A result is one JSON document, or (for a chunked result) no document
-- and the attempt whose chunks are the result.
ALTER TABLE job_results ALTER COLUMN body DROP NOT NULL;
UPDATE job_results SET body = NULL WHERE chunk_count IS NOT NULL;
ALTER TABLE job_results
    ALTER COLUMN body TYPE jsonb USING body::jsonb,
    ADD CONSTRAINT job_results_document_or_chunks
        CHECK ((body IS NULL) = (chunk_count IS NOT NULL)
               AND (chunk_attempt IS NULL) = (chunk_count IS NULL));

ALTER TABLE outbox
    ALTER COLUMN publish_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(publish_at);

-- API keys and dashboard sessions.
ALTER TABLE api_keys
    ALTER COLUMN created_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(created_at),
    ALTER COLUMN last_used_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(last_used_at),
    ALTER COLUMN revoked_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(revoked_at),
    ADD CONSTRAINT api_keys_revoked_reason CHECK (revoked_reason IN ('command', 'api_keys')),
    ADD CONSTRAINT api_keys_revoked_with_reason
        CHECK ((revoked_at IS NULL) = (revoked_reason IS NULL));

ALTER TABLE dashboard_sessions
    ALTER COLUMN created_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(created_at),
    ALTER COLUMN expires_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(expires_at);

-- Idempotency keys: the headers replayed are a JSON array of pairs.
ALTER TABLE idempotency_keys
    ALTER COLUMN created_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(created_at),
    ALTER COLUMN expires_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(expires_at),
    ALTER COLUMN response_headers TYPE jsonb USING response_headers::jsonb,
    ADD CONSTRAINT idempotency_keys_status CHECK (response_status BETWEEN 100 AND 599);

-- Webhooks: the event types subscribed to, as an array of known names.
ALTER TABLE webhooks
    ALTER COLUMN events TYPE text[]
        USING string_to_array(trim(BOTH ',' FROM events), ','),
    ALTER COLUMN enabled DROP DEFAULT,
    ALTER COLUMN enabled TYPE boolean USING enabled <> 0,
    ALTER COLUMN enabled SET DEFAULT true,
    ALTER COLUMN created_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(created_at),
    ADD CONSTRAINT webhooks_events_known CHECK (
        cardinality(events) > 0
        AND events <@ ARRAY['job.succeeded', 'job.failed', 'job.cancelled']::text[]);

ALTER TABLE webhook_events
    ALTER COLUMN created_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(created_at),
    ALTER COLUMN next_attempt_at TYPE timestamptz
        USING pg_temp.ms_to_timestamptz(next_attempt_at),
    ADD CONSTRAINT webhook_events_type
        CHECK (event_type IN ('job.succeeded', 'job.failed', 'job.cancelled'));

ALTER TABLE webhook_deliveries
    ALTER COLUMN attempted_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(attempted_at),
    ALTER COLUMN next_attempt_at TYPE timestamptz
        USING pg_temp.ms_to_timestamptz(next_attempt_at);

-- Ledger entries: a date is a `date`. Rows stored by versions that read
-- dates leniently may hold text that is no date in YYYY-MM-DD form; such a
-- row already fell outside every month. They move, unchanged, to a table
-- of their own for the tenant to correct, rather than stop the upgrade.
CREATE TABLE ledger_entries_unreadable AS
    SELECT * FROM ledger_entries
    WHERE entry_date !~ '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$'
       OR to_char(to_date(entry_date, 'YYYY-MM-DD'), 'YYYY-MM-DD') <> entry_date;
DELETE FROM ledger_entries e USING ledger_entries_unreadable u
    WHERE e.tenant_id = u.tenant_id AND e.entry_id = u.entry_id;
ALTER TABLE ledger_entries
    ALTER COLUMN entry_date TYPE date USING to_date(entry_date, 'YYYY-MM-DD'),
    ALTER COLUMN interstate TYPE boolean USING interstate <> 0,
    ALTER COLUMN created_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(created_at),
    ADD CONSTRAINT ledger_entries_rate CHECK (rate_centi >= 0);

-- Sagas, periods and filing endpoints.
ALTER TABLE saga_runs
    ALTER COLUMN updated_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(updated_at);
ALTER TABLE saga_steps
    ALTER COLUMN started_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(started_at),
    ALTER COLUMN finished_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(finished_at),
    ALTER COLUMN output TYPE jsonb USING output::jsonb,
    ALTER COLUMN compensation_started_at TYPE timestamptz
        USING pg_temp.ms_to_timestamptz(compensation_started_at),
    ALTER COLUMN compensation_finished_at TYPE timestamptz
        USING pg_temp.ms_to_timestamptz(compensation_finished_at);
ALTER TABLE periods
    ALTER COLUMN locked_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(locked_at),
    ALTER COLUMN closed_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(closed_at),
    ADD CONSTRAINT periods_month CHECK (month ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    ADD CONSTRAINT periods_closed CHECK ((state = 'closed') = (closed_at IS NOT NULL));
ALTER TABLE filing_endpoints
    ALTER COLUMN created_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(created_at),
    ALTER COLUMN updated_at TYPE timestamptz USING pg_temp.ms_to_timestamptz(updated_at);

-- The dashboard's counters: a minute is the `timestamptz` it starts at.
ALTER TABLE job_counts
    ADD CONSTRAINT job_counts_status
        CHECK (status IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'));
ALTER TABLE job_minutes
    ALTER COLUMN minute TYPE timestamptz USING to_timestamp(minute * 60),
    ADD CONSTRAINT job_minutes_status CHECK (status IN ('SUCCEEDED', 'FAILED', 'CANCELLED'));
ALTER TABLE job_count_deltas
    ALTER COLUMN minute TYPE timestamptz USING to_timestamp(minute * 60),
    ADD CONSTRAINT job_count_deltas_status
        CHECK (status IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'));

-- The counters' triggers, as before, with a minute of `timestamptz`.
CREATE FUNCTION job_counts_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_count_deltas (tenant_id, kind, status, minute, delta)
        VALUES (NEW.tenant_id, NEW.kind, NEW.status,
                CASE WHEN NEW.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                     THEN date_trunc('minute', NEW.finished_at) END, 1);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_count_deltas (tenant_id, kind, status, minute, delta)
        VALUES (OLD.tenant_id, OLD.kind, OLD.status,
                CASE WHEN OLD.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                     THEN date_trunc('minute', OLD.finished_at) END, -1);
    ELSE
        INSERT INTO job_count_deltas (tenant_id, kind, status, minute, delta)
        VALUES (OLD.tenant_id, OLD.kind, OLD.status,
                CASE WHEN OLD.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                     THEN date_trunc('minute', OLD.finished_at) END, -1),
               (NEW.tenant_id, NEW.kind, NEW.status,
                CASE WHEN NEW.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                     THEN date_trunc('minute', NEW.finished_at) END, 1);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs
    FOR EACH ROW EXECUTE FUNCTION job_counts_track();
-- Progress and lease updates (the frequent ones) do not fire it.
CREATE TRIGGER job_counts_update AFTER UPDATE OF status, finished_at, tenant_id, kind ON jobs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          OR OLD.finished_at IS DISTINCT FROM NEW.finished_at
          OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
          OR OLD.kind IS DISTINCT FROM NEW.kind)
    EXECUTE FUNCTION job_counts_track();
CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION job_counts_track();

-- The claim of a batch of jobs (`Store::claim_attempts`), as before, with
-- times of `timestamptz` and parameters of `jsonb`. Times come from the
-- process's clock, as every time Receipt writes. A function, so that
-- the UPDATE keeps its prepared plan while the DELETE is planned each time
-- for the rows `outbox` holds then (dynamic SQL is never cached): `outbox`
-- is a queue, empty one minute and a backlog the next, and a plan kept
-- from an empty moment reads the whole backlog on every claim.
CREATE FUNCTION claim_jobs(ids TEXT[], now_at timestamptz, lease_until timestamptz, worker TEXT)
RETURNS TABLE (
    job_id TEXT, tenant_id TEXT, kind TEXT, params jsonb, attempts BIGINT, handbacks BIGINT,
    max_attempts BIGINT
) LANGUAGE plpgsql AS $$
DECLARE
    claimed TEXT[] := '{}';
BEGIN
    -- Requiring QUEUED is the guard: of two deliveries of one job, in one
    -- batch or in two processes, one finds it running.
    FOR job_id, tenant_id, kind, params, attempts, handbacks, max_attempts IN
        UPDATE jobs AS j
        SET status = 'RUNNING', attempts = j.attempts + 1,
            started_at = COALESCE(j.started_at, now_at), lease_expires_at = lease_until,
            worker_id = worker
        WHERE j.job_id = ANY (ids) AND j.status = 'QUEUED' AND j.run_after <= now_at
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
