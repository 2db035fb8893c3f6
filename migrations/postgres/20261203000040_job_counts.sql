-- The dashboard's overview counts a tenant's jobs by kind and status, and
-- the jobs finished per minute, without reading the jobs: triggers on
-- `jobs` record every change of a job's status (or finish time) as it is
-- made, in the same transaction, whichever statement made it.
--
-- A tenant's busy counters would be hot rows: every claim and finish of its
-- jobs would update the same few rows and wait on each other's locks (and
-- two transactions updating the QUEUED and RUNNING rows in opposite orders
-- would deadlock). So the triggers only append to `job_count_deltas`, an
-- unindexed table that takes inserts without locking anything; the lease
-- sweeper folds the deltas into `job_counts` and `job_minutes` every few
-- seconds (`Store::fold_job_counts`), and a reader adds the deltas not yet
-- folded to the folded rows, in one statement and so one snapshot.

-- Jobs by tenant, kind and status; a row may hold 0.
CREATE TABLE job_counts (
    tenant_id TEXT NOT NULL,
    kind      TEXT NOT NULL,
    status    TEXT NOT NULL,
    n         BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, kind, status)
);

-- Final jobs by tenant, the minute of their finished_at
-- (finished_at / 60000) and status.
CREATE TABLE job_minutes (
    tenant_id TEXT NOT NULL,
    minute    BIGINT NOT NULL,
    status    TEXT NOT NULL,
    n         BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, minute, status)
);
-- A minute's row reaches 0 only when its jobs are deleted (retention); the
-- fold deletes such rows through this index.
CREATE INDEX job_minutes_empty ON job_minutes (tenant_id) WHERE n = 0;

-- Changes not yet folded: -1 for the job's row before, +1 after. `minute`
-- is set when that side is a final status with a finish time, and then the
-- delta counts in `job_minutes` too.
CREATE TABLE job_count_deltas (
    tenant_id TEXT NOT NULL,
    kind      TEXT NOT NULL,
    status    TEXT NOT NULL,
    minute    BIGINT,
    delta     BIGINT NOT NULL
);

CREATE FUNCTION job_counts_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_count_deltas (tenant_id, kind, status, minute, delta)
        VALUES (NEW.tenant_id, NEW.kind, NEW.status,
                CASE WHEN NEW.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                     THEN NEW.finished_at / 60000 END, 1);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_count_deltas (tenant_id, kind, status, minute, delta)
        VALUES (OLD.tenant_id, OLD.kind, OLD.status,
                CASE WHEN OLD.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                     THEN OLD.finished_at / 60000 END, -1);
    ELSE
        INSERT INTO job_count_deltas (tenant_id, kind, status, minute, delta)
        VALUES (OLD.tenant_id, OLD.kind, OLD.status,
                CASE WHEN OLD.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                     THEN OLD.finished_at / 60000 END, -1),
               (NEW.tenant_id, NEW.kind, NEW.status,
                CASE WHEN NEW.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                     THEN NEW.finished_at / 60000 END, 1);
    END IF;
    RETURN NULL;
END
$$;

-- No job changes while the counts are initialised, so none is missed or
-- counted twice; the lock is held until the migration commits.
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

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

INSERT INTO job_counts (tenant_id, kind, status, n)
SELECT tenant_id, kind, status, COUNT(*) FROM jobs GROUP BY tenant_id, kind, status;

INSERT INTO job_minutes (tenant_id, minute, status, n)
SELECT tenant_id, finished_at / 60000, status, COUNT(*) FROM jobs
WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND finished_at IS NOT NULL
GROUP BY tenant_id, finished_at / 60000, status;
