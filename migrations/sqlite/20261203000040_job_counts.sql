-- The dashboard's overview counts a tenant's jobs by kind and status, and
-- the jobs finished per minute, without reading the jobs: triggers on
-- `jobs` keep `job_counts` and `job_minutes` up to date in the same
-- transaction as every change of a job's status (or finish time),
-- whichever statement made it. SQLite has one writer at a time, so the
-- triggers update the counters directly; `job_count_deltas` exists, empty,
-- so that one query reads the counts on both backends (on Postgres the
-- triggers append deltas there, to keep writers off hot rows).

CREATE TABLE job_counts (
    tenant_id TEXT NOT NULL,
    kind      TEXT NOT NULL,
    status    TEXT NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, kind, status)
) WITHOUT ROWID;

-- Final jobs by tenant, the minute of their finished_at
-- (finished_at / 60000) and status.
CREATE TABLE job_minutes (
    tenant_id TEXT NOT NULL,
    minute    INTEGER NOT NULL,
    status    TEXT NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, minute, status)
) WITHOUT ROWID;
-- A minute's row reaches 0 only when its jobs are deleted (retention); the
-- fold deletes such rows through this index.
CREATE INDEX job_minutes_empty ON job_minutes (tenant_id) WHERE n = 0;

CREATE TABLE job_count_deltas (
    tenant_id TEXT NOT NULL,
    kind      TEXT NOT NULL,
    status    TEXT NOT NULL,
    minute    INTEGER,
    delta     INTEGER NOT NULL
);

CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs
BEGIN
    INSERT INTO job_counts (tenant_id, kind, status, n)
    VALUES (NEW.tenant_id, NEW.kind, NEW.status, 1)
    ON CONFLICT (tenant_id, kind, status) DO UPDATE SET n = n + 1;
    INSERT INTO job_minutes (tenant_id, minute, status, n)
    SELECT NEW.tenant_id, NEW.finished_at / 60000, NEW.status, 1
    WHERE NEW.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND NEW.finished_at IS NOT NULL
    ON CONFLICT (tenant_id, minute, status) DO UPDATE SET n = n + 1;
END;

-- Progress and lease updates (the frequent ones) do not fire it.
CREATE TRIGGER job_counts_update AFTER UPDATE OF status, finished_at, tenant_id, kind ON jobs
WHEN OLD.status IS NOT NEW.status OR OLD.finished_at IS NOT NEW.finished_at
     OR OLD.tenant_id IS NOT NEW.tenant_id OR OLD.kind IS NOT NEW.kind
BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND kind = OLD.kind AND status = OLD.status;
    UPDATE job_minutes SET n = n - 1
    WHERE OLD.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND OLD.finished_at IS NOT NULL
      AND tenant_id = OLD.tenant_id AND minute = OLD.finished_at / 60000 AND status = OLD.status;
    INSERT INTO job_counts (tenant_id, kind, status, n)
    VALUES (NEW.tenant_id, NEW.kind, NEW.status, 1)
    ON CONFLICT (tenant_id, kind, status) DO UPDATE SET n = n + 1;
    INSERT INTO job_minutes (tenant_id, minute, status, n)
    SELECT NEW.tenant_id, NEW.finished_at / 60000, NEW.status, 1
    WHERE NEW.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND NEW.finished_at IS NOT NULL
    ON CONFLICT (tenant_id, minute, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs
BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE tenant_id = OLD.tenant_id AND kind = OLD.kind AND status = OLD.status;
    UPDATE job_minutes SET n = n - 1
    WHERE OLD.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND OLD.finished_at IS NOT NULL
      AND tenant_id = OLD.tenant_id AND minute = OLD.finished_at / 60000 AND status = OLD.status;
END;

INSERT INTO job_counts (tenant_id, kind, status, n)
SELECT tenant_id, kind, status, COUNT(*) FROM jobs WHERE true GROUP BY tenant_id, kind, status;

INSERT INTO job_minutes (tenant_id, minute, status, n)
SELECT tenant_id, finished_at / 60000, status, COUNT(*) FROM jobs
WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND finished_at IS NOT NULL
GROUP BY tenant_id, finished_at / 60000, status;
