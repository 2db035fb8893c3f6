// What the usual stack's api and worker share: settings from the
// environment (as the bench gives them), the Postgres pool, the BullMQ
// queue's name and Redis connection, and the schema.
import pg from "pg";

export const QUEUE = "jobs";

export const settings = {
  databaseUrl: required("DATABASE_URL"),
  redis: new URL(process.env.REDIS_URL ?? "redis://127.0.0.1:6379"),
  // Every BullMQ key starts with it, so that a run's keys are its own.
  prefix: required("QUEUE_PREFIX"),
  concurrency: Number(process.env.WORKER_CONCURRENCY ?? 16),
  poolSize: Number(process.env.PG_POOL_SIZE ?? 10),
  bind: process.env.BIND_ADDR ?? "127.0.0.1:0",
};

export const connection = {
  host: settings.redis.hostname,
  port: Number(settings.redis.port || 6379),
  // BullMQ's workers block on Redis; it asks for this on their connections.
  maxRetriesPerRequest: null,
};

export const pool = new pg.Pool({
  connectionString: settings.databaseUrl,
  max: settings.poolSize,
});

// The columns Receipt's bench reads from a service's `jobs` table.
export const SCHEMA = `
CREATE TABLE IF NOT EXISTS jobs (
  job_id      text PRIMARY KEY,
  tenant_id   text NOT NULL,
  kind        text NOT NULL,
  params      jsonb NOT NULL,
  status      text NOT NULL,
  attempts    integer NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now(),
  started_at  timestamptz,
  finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS jobs_by_tenant_status ON jobs (tenant_id, status, job_id);
CREATE TABLE IF NOT EXISTS idempotency_keys (
  tenant_id    text NOT NULL,
  key          text NOT NULL,
  request_hash text NOT NULL,
  job_id       text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, key)
);
`;

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} is required`);
    process.exit(2);
  }
  return value;
}
