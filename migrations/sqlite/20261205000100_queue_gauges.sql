-- The QUEUED jobs of each kind by due time: the oldest due job of a kind,
-- which the queue's age gauge (`receipt_queue_oldest_seconds`) reads at
-- every sample, is this index's first entry for the kind, however many
-- jobs wait (delayed ones included).
CREATE INDEX jobs_queued_by_kind ON jobs (kind, run_after) WHERE status = 'QUEUED';
