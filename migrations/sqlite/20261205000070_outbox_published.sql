-- The published rows of the outbox, by job id: what the lost-message
-- sweep pages through. A delayed job's row waits unpublished
-- (`republish_ms = 0`) until its start; without this index each page of
-- the sweep would walk past every one of them.
CREATE INDEX outbox_published ON outbox (job_id) WHERE republish_ms > 0;
