-- The job row is the queue (`docs/design.md`, The job row is the queue):
-- a worker claims due jobs straight from `jobs`, each tenant's by rank.
CREATE INDEX jobs_claimable ON jobs (tenant_id, rank_at, job_id)
    WHERE status = 'QUEUED' AND capped IS NULL;
