// What graphile-worker's producers and worker share: settings from the
// environment (as the bench gives them), and a logger that prints only
// warnings and errors, as Receipt's services run in the bench
// (`RUST_LOG=error`): graphile-worker's own logs a line per job.
import { Logger } from "graphile-worker";

export const TASK = "sleep";

export const settings = {
  databaseUrl: required("DATABASE_URL"),
  concurrency: Number(process.env.WORKER_CONCURRENCY ?? 16),
  producers: Number(process.env.PRODUCERS ?? 16),
  jobs: Number(process.env.JOBS ?? 0),
};

export const logger = new Logger((scope) => (level, message) => {
  if (level === "error" || level === "warning") {
    console.error(`${level} ${JSON.stringify(scope)}: ${message}`);
  }
});

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} is required`);
    process.exit(2);
  }
  return value;
}
