-- A retry of a FAILED or CANCELLED job is a new job with the same kind and
-- parameters (`POST /v1/jobs/{id}/retry`): every job keeps exactly one
-- final status. `retry_of` names the job it retries.
ALTER TABLE jobs ADD COLUMN retry_of TEXT;
-- A job's retries, for its page in the dashboard. Partial: most jobs are
-- no retry.
CREATE INDEX jobs_by_retry_of ON jobs (retry_of) WHERE retry_of IS NOT NULL;
