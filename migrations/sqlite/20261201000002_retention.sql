-- Retention (JOB_RETENTION): a job final for longer than the retention is
-- deleted with its result, its webhook events and their delivery log, and
-- any webhook registered for it alone. Ledger entries and idempotency keys
-- are not touched (keys expire on their own TTL). The same as on Postgres.

-- The pruner's way in: final jobs in the order they finished. Partial, so
-- queued and running jobs (the hot rows) never enter it.
CREATE INDEX jobs_finished ON jobs (finished_at)
    WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED');

-- A webhook event names its job, so the job's events go with it. Events
-- written before this column existed carry the job in their body.
ALTER TABLE webhook_events ADD COLUMN job_id TEXT;
UPDATE webhook_events SET job_id = json_extract(body, '$.data.job_id') WHERE job_id IS NULL;
CREATE INDEX webhook_events_by_job ON webhook_events (job_id);

-- The delivery log of one event, deleted with it.
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);
