#!/usr/bin/env node
// The usual stack's worker: a BullMQ Worker of WORKER_CONCURRENCY that,
// for each message, claims the job in Postgres (QUEUED to RUNNING, so a
// message delivered twice runs the job once), sleeps its `ms`, and records
// it SUCCEEDED.
import { Worker } from "bullmq";
import { QUEUE, connection, pool, settings } from "./common.mjs";

const worker = new Worker(
  QUEUE,
  async (message) => {
    const claimed = await pool.query(
      "UPDATE jobs SET status = 'RUNNING', started_at = now(), attempts = attempts + 1 WHERE job_id = $1 AND status = 'QUEUED' RETURNING params",
      [message.data.job_id],
    );
    if (claimed.rowCount === 0) {
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, claimed.rows[0].params.ms));
    await pool.query("UPDATE jobs SET status = 'SUCCEEDED', finished_at = now() WHERE job_id = $1", [
      message.data.job_id,
    ]);
  },
  { connection, prefix: settings.prefix, concurrency: settings.concurrency },
);
worker.on("failed", (message, error) => console.error(`job ${message?.data?.job_id}: ${error}`));
await worker.waitUntilReady();
console.log("worker ready");

for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, async () => {
    await worker.close();
    await pool.end();
    process.exit(0);
  });
}
