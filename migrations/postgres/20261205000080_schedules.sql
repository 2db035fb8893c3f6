-- Recurring schedules (`/v1/schedules`): each due fire makes one job.
--
-- `next_fire_at` is the fire a scheduler takes next; it moves on in the
-- transaction that makes the fire's job, so a fire whose transaction did
-- not commit is taken again, and one that did is never taken twice. NULL
-- once the schedule has no fire left (past its end).
CREATE TABLE schedules (
    schedule_id  text PRIMARY KEY,
    tenant_id    text NOT NULL,
    kind         text NOT NULL,
    params       jsonb NOT NULL,        -- the template: {"$fire": "..."} values filled per fire
    cron         text NOT NULL,
    timezone     text NOT NULL,         -- an IANA name
    starts_at    timestamptz,
    ends_at      timestamptz,
    misfire      text NOT NULL CHECK (misfire IN ('skip', 'run_once')),
    paused       boolean NOT NULL DEFAULT false,
    next_fire_at timestamptz,
    last_fire_at timestamptz,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE NOT paused AND next_fire_at IS NOT NULL;
CREATE INDEX schedules_by_tenant ON schedules (tenant_id, schedule_id);

-- A job made by a fire names its schedule and the fire; one job per fire,
-- whatever happens between the processes that fire.
ALTER TABLE jobs ADD COLUMN schedule_id text, ADD COLUMN fire_at timestamptz;
CREATE UNIQUE INDEX jobs_schedule_fires ON jobs (schedule_id, fire_at) WHERE schedule_id IS NOT NULL;
