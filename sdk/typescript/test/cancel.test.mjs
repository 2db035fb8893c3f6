// (c) A cancel reaches a running handler through its AbortSignal within one
// heartbeat interval, and the job ends CANCELLED; the progress a handler
// reports is shown on the job meanwhile.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Cancelled, Client, Worker } from "@receipt/worker";

import { JOB_LEASE_MS, deferred, defer, startApi, waitFor, within } from "./helpers/support.mjs";

test("a cancel aborts the handler's signal within a heartbeat and the job ends CANCELLED", { timeout: 60_000 }, async (t) => {
  const api = await startApi(t);
  const workKey = await api.createKey({ scope: "work" });
  const client = new Client({ baseUrl: api.url, key: api.key });
  await client.registerKind("long-export", { timeoutSecs: 60, paramsSchema: { type: "object" } });

  const started = deferred();
  const aborted = deferred();
  const worker = new Worker({ baseUrl: api.url, key: workKey, name: "cancel-1", handleSignals: false, logLevel: "warn" });
  worker.kind("long-export", async (attempt) => {
    attempt.progress(0.25);
    started.resolve(attempt);
    // Work that stops only when its signal says so.
    await new Promise((_, reject) => {
      attempt.signal.addEventListener("abort", () => {
        aborted.resolve({ at: Date.now(), reason: attempt.signal.reason, stopReason: attempt.stopReason });
        reject(attempt.signal.reason);
      });
    });
  });
  const running = worker.run();
  defer(t, () => worker.stop());

  const { job_id: jobId } = await client.submit("long-export", {});
  const attempt = await within("the handler to start", started.promise);
  assert.equal(attempt.jobId, jobId);
  // The progress goes with the heartbeats (shown at most every 250 ms).
  await waitFor("the job to show the handler's progress", async () => (await client.job(jobId)).progress === 0.25, {
    timeoutMs: 5_000,
  });

  const cancelAt = Date.now();
  const answer = await client.cancel(jobId);
  assert.equal(answer.status, "RUNNING");
  assert.equal(answer.cancel_requested, true);

  const stop = await within("the handler's signal to abort", aborted.promise, 10_000);
  // Heartbeats go at least every third of the lease (2 s here): the next one
  // after the cancel brings it, plus the time of that request.
  const interval = JOB_LEASE_MS / 3;
  const took = stop.at - cancelAt;
  t.diagnostic(`the cancel reached the handler after ${took} ms`);
  assert.ok(took <= interval + 400, `the cancel reached the handler after ${took} ms (heartbeat interval ${Math.round(interval)} ms)`);
  assert.ok(stop.reason instanceof Cancelled);
  assert.equal(stop.reason.reason, "cancel_requested");
  assert.equal(stop.stopReason, "cancel_requested");

  const done = await client.wait(jobId, { timeoutMs: 10_000 });
  assert.equal(done.status, "CANCELLED");
  assert.equal(done.attempts, 1);
  assert.equal(done.result_url, null);

  await within("the worker to stop", worker.stop(), 10_000);
  await running;
});
