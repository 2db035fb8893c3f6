-- The queue of the production shape without Redis: one row per message,
-- handed out fairly between tenants (each consumer takes tenants in turn)
-- and, within a tenant, by rank (`docs/design.md`, The database queue).
-- A fetched row names its consumer until the handler is done (the row is
-- deleted) or the consumer stops sending heartbeats (the row is handed out
-- again). A job has at most one waiting message; one pushed while another
-- is in flight (a job made due again before its handler returned) waits
-- beside it. It replaces apalis's Postgres storage, which hands messages
-- out by rank over all tenants.
CREATE TABLE queue_messages (
    message_id  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      TEXT COLLATE "C" NOT NULL,
    queue       TEXT COLLATE "C" NOT NULL,
    tenant_id   TEXT COLLATE "C" NOT NULL,
    rank_at     TIMESTAMPTZ NOT NULL,
    consumer    TEXT COLLATE "C",
    fetched_at  TIMESTAMPTZ
);

-- The waiting messages, by tenant and rank: a fetch walks the tenants with
-- one probe each and takes each tenant's first by rank.
CREATE INDEX queue_messages_waiting ON queue_messages (queue, tenant_id, rank_at, message_id)
    WHERE consumer IS NULL;

-- One waiting message per job: a push for a job that has one adds none.
CREATE UNIQUE INDEX queue_messages_one_waiting ON queue_messages (job_id)
    WHERE consumer IS NULL;

-- The messages in flight, by consumer: what a stopped consumer held.
CREATE INDEX queue_messages_in_flight ON queue_messages (consumer)
    WHERE consumer IS NOT NULL;

-- A consumer is alive while `alive_until` is ahead; its heartbeat moves it.
CREATE TABLE queue_consumers (
    queue        TEXT COLLATE "C" NOT NULL,
    consumer     TEXT COLLATE "C" NOT NULL,
    alive_until  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (queue, consumer)
);
