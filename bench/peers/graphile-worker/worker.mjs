#!/usr/bin/env node
// graphile-worker's worker: `run` installs its schema in the database (or
// finds it there), then runs `sleep` jobs ({"ms": N}) on WORKER_CONCURRENCY
// slots, taking new jobs as Postgres notifies it of them.
import { run } from "graphile-worker";
import { TASK, logger, settings } from "./common.mjs";

const runner = await run({
  connectionString: settings.databaseUrl,
  concurrency: settings.concurrency,
  // What graphile-worker's documentation advises: 10 or the slots and 2,
  // whichever is larger.
  maxPoolSize: Math.max(10, settings.concurrency + 2),
  logger,
  taskList: {
    [TASK]: async (payload) => {
      await new Promise((resolve) => setTimeout(resolve, payload.ms));
    },
  },
});
runner.events.on("job:error", ({ job, error }) => console.error(`job ${job.id}: ${error}`));
console.log("worker ready");
await runner.promise;
