-- Recurring schedules (`/v1/schedules`): each due fire makes one job.
--
-- `next_fire_at` is the fire a scheduler takes next; it moves on in the
-- transaction that makes the fire's job, so a fire whose transaction did
-- not commit is taken again, and one that did is never taken twice. NULL
-- once the schedule has no fire left (past its end). Times in unix ms.
CREATE TABLE schedules (
    schedule_id  TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    kind         TEXT NOT NULL,
    params       TEXT NOT NULL,         -- the template: {"$fire": "..."} values filled per fire
    cron         TEXT NOT NULL,
    timezone     TEXT NOT NULL,         -- an IANA name
    starts_at    BIGINT,
    ends_at      BIGINT,
    misfire      TEXT NOT NULL CHECK (misfire IN ('skip', 'run_once')),
    paused       BIGINT NOT NULL DEFAULT 0,   -- 0 or 1
    next_fire_at BIGINT,
    last_fire_at BIGINT,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE NOT paused AND next_fire_at IS NOT NULL;
CREATE INDEX schedules_by_tenant ON schedules (tenant_id, schedule_id);

-- A job made by a fire names its schedule and the fire; one job per fire,
-- whatever happens between the processes that fire.
ALTER TABLE jobs ADD COLUMN schedule_id TEXT;
ALTER TABLE jobs ADD COLUMN fire_at BIGINT;
CREATE UNIQUE INDEX jobs_schedule_fires ON jobs (schedule_id, fire_at) WHERE schedule_id IS NOT NULL;
