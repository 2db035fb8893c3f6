-- Attempts handed back at shutdown (SIGTERM, grace ran out) do not count
-- against the attempt limit: a deploy must not use up a job's attempts.
-- `attempts` stays the fencing token and grows on every claim; the
-- attempts that count, and that the API shows, are `attempts - handbacks`.
ALTER TABLE jobs ADD COLUMN handbacks BIGINT NOT NULL DEFAULT 0;
