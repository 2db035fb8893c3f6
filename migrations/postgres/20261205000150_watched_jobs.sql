-- A success ends in one statement, outside any transaction of its own,
-- when no webhook can want its job's event; only then is there no event
-- to write with it. A webhook for the whole tenant is looked up by that
-- statement. One for a single job is registered while holding the job's
-- row, and the registration marks the row `webhook_watched`: a success
-- that waited for that row sees the mark on the row itself (Postgres
-- checks an updated row's conditions again), where a look into `webhooks`
-- would still see the table as it was when the statement began. A marked
-- job ends in the transaction that writes its events. The mark is never
-- cleared: a job whose webhook went away only takes the longer way.
ALTER TABLE jobs ADD COLUMN webhook_watched boolean NOT NULL DEFAULT false;

UPDATE jobs SET webhook_watched = true
WHERE job_id IN (SELECT job_id FROM webhooks WHERE job_id IS NOT NULL);
