// (d) How a handler's end is reported: a Retryable failure is tried again
// and succeeds on attempt 2; a Permanent one ends FAILED with its
// error_type; any other error is retryable, named by the error's name; a
// handler that runs into its deadline is stopped and reported as a
// retryable timeout.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, Permanent, Retryable, Worker } from "@receipt/worker";

import { defer, startApi, within } from "./helpers/support.mjs";

test("retryable, permanent and other failures, and the deadline", { timeout: 60_000 }, async (t) => {
  const api = await startApi(t);
  const workKey = await api.createKey({ scope: "work" });
  const client = new Client({ baseUrl: api.url, key: api.key });
  const schema = {
    type: "object",
    properties: { mode: { enum: ["retry-then-ok", "permanent", "crash"] } },
    required: ["mode"],
    additionalProperties: false,
  };
  await client.registerKind("flaky", { timeoutSecs: 60, maxAttempts: 2, paramsSchema: schema });
  await client.registerKind("slow", { timeoutSecs: 1, maxAttempts: 1, paramsSchema: { type: "object" } });

  const seen = [];
  const slowStops = [];
  const worker = new Worker({ baseUrl: api.url, key: workKey, name: "flaky-1", concurrency: 4, handleSignals: false, logLevel: "error" });
  worker.kind("flaky", async (attempt) => {
    seen.push(`${attempt.params.mode}#${attempt.attempt}`);
    switch (attempt.params.mode) {
      case "retry-then-ok":
        if (attempt.attempt === 1) throw new Retryable("the sales database timed out", { errorType: "db_timeout" });
        return { attempt: attempt.attempt };
      case "permanent":
        throw new Permanent("no such region: atlantis", { errorType: "bad_region" });
      default:
        throw new RangeError("row 7 is out of range");
    }
  });
  worker.kind("slow", async (attempt) => {
    try {
      await attempt.sleep(60_000);
    } finally {
      slowStops.push({ stopReason: attempt.stopReason, at: Date.now(), deadline: attempt.deadline.getTime() });
    }
  });
  const running = worker.run();
  defer(t, () => worker.stop());

  const [retried, permanent, crashed, slow] = await Promise.all([
    client.submit("flaky", { mode: "retry-then-ok" }),
    client.submit("flaky", { mode: "permanent" }),
    client.submit("flaky", { mode: "crash" }),
    client.submit("slow", {}),
  ]);
  const [retriedDone, permanentDone, crashedDone, slowDone] = await within(
    "the four jobs to end",
    Promise.all([retried, permanent, crashed, slow].map((job) => client.wait(job.job_id, { timeoutMs: 20_000 }))),
  );

  // Retryable on attempt 1, then success on attempt 2.
  assert.equal(retriedDone.status, "SUCCEEDED");
  assert.equal(retriedDone.attempts, 2);
  assert.equal(retriedDone.error, null);
  assert.deepEqual((await client.result(retried.job_id)).json(), { attempt: 2 });

  // Permanent: FAILED at once, with its error_type and message.
  assert.equal(permanentDone.status, "FAILED");
  assert.equal(permanentDone.attempts, 1);
  assert.deepEqual(permanentDone.error, { type: "bad_region", message: "no such region: atlantis" });

  // Any other error: retryable (both attempts used), named by the error's name.
  assert.equal(crashedDone.status, "FAILED");
  assert.equal(crashedDone.attempts, 2);
  assert.deepEqual(crashedDone.error, { type: "RangeError", message: "row 7 is out of range" });

  assert.deepEqual(seen.sort(), ["crash#1", "crash#2", "permanent#1", "retry-then-ok#1", "retry-then-ok#2"]);

  // The deadline: the handler's signal aborts (just before it), the SDK reports a timeout.
  assert.equal(slowDone.status, "FAILED");
  assert.equal(slowDone.attempts, 1);
  assert.equal(slowDone.error.type, "timeout");
  assert.match(slowDone.error.message, /ran past its deadline/, "the SDK's own report");
  assert.equal(slowStops.length, 1);
  assert.equal(slowStops[0].stopReason, "timeout");
  assert.ok(slowStops[0].at <= slowStops[0].deadline + 100, "stopped by the deadline");

  await within("the worker to stop", worker.stop(), 10_000);
  await running;
});
