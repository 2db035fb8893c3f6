-- Traces: each job keeps the W3C `traceparent` of the request that made
-- it (NULL when nothing was traced, and for a schedule's fire, whose
-- attempts start traces of their own), written with the job and read back
-- by the claim, so that every attempt joins the job's trace without a
-- statement of its own; each webhook event keeps the one of the write
-- that made it, so that its deliveries join the trace of that write.
-- Columns without a default: adding them rewrites nothing.
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
ALTER TABLE webhook_events ADD COLUMN traceparent TEXT;
