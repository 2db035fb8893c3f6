-- The workers over HTTP a tenant has: each seen at its leases, by its
-- name, with the kinds it named and how many attempts it took and failed.
-- What each holds now is its RUNNING jobs (`jobs.worker_id` = 'http:' ||
-- name).
CREATE TABLE workers (
    tenant_id     TEXT NOT NULL,
    name          TEXT NOT NULL,
    kinds         TEXT NOT NULL,
    first_seen_at BIGINT NOT NULL,
    last_seen_at  BIGINT NOT NULL,
    leased        BIGINT NOT NULL DEFAULT 0,
    failed        BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, name)
);
