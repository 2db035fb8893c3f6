-- The lease sweeper's index no longer matches `status = 'RUNNING'`.
--
-- `jobs_running_leases` (partial on `status = 'RUNNING'`) holds a few
-- entries in a steady queue, so Postgres preferred it to the primary key
-- for every statement that names a running job (`WHERE job_id = $1 AND
-- status = 'RUNNING'`: a heartbeat, a progress report, a success batch)
-- and read the whole index to find one job. While anything holds back the
-- xmin horizon (a transaction left open, a long report, a replica's
-- feedback), vacuum can remove none of the entries of the jobs that
-- finished meanwhile, and each of those statements walked all of them.
--
-- The same index keyed on the lease alone: every statement that ends an
-- attempt clears the lease, so it holds the running jobs as before, and the
-- sweeper's `lease_expires_at < $1` still finds it, but no statement that
-- names a job by id can choose it over the primary key.
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
DROP INDEX jobs_running_leases;
