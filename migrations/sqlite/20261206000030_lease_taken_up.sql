-- Whether a worker over HTTP took up its lease: false from the lease until
-- the attempt's first heartbeat (NULL for the built-in workers' jobs). A
-- lease that lapses untaken was never received (its long poll's client
-- had gone away), so its attempt is handed back rather than counted.
ALTER TABLE jobs ADD COLUMN lease_taken_up BOOLEAN;
