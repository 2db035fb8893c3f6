#!/usr/bin/env node
// graphile-worker's producers: PRODUCERS concurrent loops, each awaiting
// one `addJob` at a time, JOBS `sleep` jobs of `ms: 0` in all. Each loop
// has a connection of its own, opened before "producers ready", so that
// the Postgres backends doing the work are there when the bench starts
// counting their CPU; the loops start on SIGUSR1. After "added N" the
// process stays, its connections open, until the bench has read their
// CPU and stops it.
import { makeWorkerUtils } from "graphile-worker";
import { TASK, logger, settings } from "./common.mjs";

const utils = await makeWorkerUtils({
  connectionString: settings.databaseUrl,
  maxPoolSize: settings.producers,
  logger,
});
await Promise.all(
  Array.from({ length: settings.producers }, () => utils.withPgClient((client) => client.query("SELECT 1"))),
);

async function produce() {
  let next = 0;
  await Promise.all(
    Array.from({ length: settings.producers }, async () => {
      while (next < settings.jobs) {
        next += 1;
        await utils.addJob(TASK, { ms: 0 });
      }
    }),
  );
  console.log(`added ${settings.jobs}`);
}

process.once("SIGUSR1", () => {
  produce().catch((error) => {
    console.error(`adding jobs: ${error}`);
    process.exit(1);
  });
});
// Waits for the signal, and after the jobs for the bench to stop it.
setInterval(() => {}, 1 << 30);
console.log("producers ready");
