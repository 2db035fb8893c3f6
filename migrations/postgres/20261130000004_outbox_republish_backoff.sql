-- A job waiting in the queue longer than REPUBLISH_AFTER is published again
-- in case the queue lost it; each further republish waits twice as long, so
-- a long backlog does not fill the queue with copies.
ALTER TABLE outbox ADD COLUMN republish_ms BIGINT NOT NULL DEFAULT 0;
