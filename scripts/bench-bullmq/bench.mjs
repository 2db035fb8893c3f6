// BullMQ end to end: N jobs, C concurrent producers each awaiting one
// `add` per job, a no-op processor on a Worker with concurrency C. Time from
// the first add to the last completion. Prints one JSON line.
import { Queue, Worker } from "bullmq";

const args = Object.fromEntries(
  process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=")),
);
const jobs = Number(args.jobs ?? 20000);
const concurrency = Number(args.concurrency ?? 16);
const prefix = args.prefix ?? `bench-bullmq-${process.pid}`;
const connection = { host: "127.0.0.1", port: 6379 };

const queue = new Queue("bench", { connection, prefix });
let done = 0;
let finish;
const finished = new Promise((resolve) => (finish = resolve));
const worker = new Worker("bench", async () => {}, { connection, prefix, concurrency });
worker.on("completed", () => {
  done += 1;
  if (done === jobs) finish(process.hrtime.bigint());
});
await worker.waitUntilReady();

const started = process.hrtime.bigint();
let next = 0;
await Promise.all(
  Array.from({ length: concurrency }, async () => {
    while (next < jobs) {
      const i = next++;
      await queue.add("noop", { i }, { removeOnComplete: true });
    }
  }),
);
const ended = await finished;
const seconds = Number(ended - started) / 1e9;
console.log(JSON.stringify({ system: "bullmq", jobs, concurrency, seconds, jobs_per_s: jobs / seconds }));
await worker.close();
await queue.obliterate({ force: true });
await queue.close();
