// Stopping a worker: leasing stops at once, a running handler finishes
// within the grace and is reported; one that outlasts the grace is not
// reported at all, and its job runs again elsewhere once its lease lapses.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, Worker } from "@receipt/worker";

import { deferred, defer, startApi, waitFor, within } from "./helpers/support.mjs";

test("stop() lets running handlers finish within the grace; past it, nothing is reported", { timeout: 60_000 }, async (t) => {
  const api = await startApi(t);
  const workKey = await api.createKey({ scope: "work" });
  const client = new Client({ baseUrl: api.url, key: api.key });
  await client.registerKind("report", { timeoutSecs: 60, maxAttempts: 3, paramsSchema: { type: "object" } });
  const options = { baseUrl: api.url, key: workKey, handleSignals: false, logLevel: "error" };

  // 1. Within the grace: finished and reported.
  const started = deferred();
  const release = deferred();
  const patient = new Worker({ ...options, name: "patient-1", shutdownGraceMs: 10_000 });
  const patientJobs = [];
  patient.kind("report", async (attempt) => {
    patientJobs.push(attempt.jobId);
    started.resolve(attempt);
    await release.promise;
    return { shuttingDown: attempt.shuttingDown, by: "patient-1" };
  });
  const patientRun = patient.run();
  defer(t, () => patient.stop());
  const first = await client.submit("report", { n: 1 });
  const attempt = await within("the first handler to start", started.promise);
  const stopped = patient.stop();
  await waitFor("the handler to be told of the shutdown", () => attempt.shuttingDown);
  // Leasing has stopped: a job submitted now is not this worker's. (The
  // api may still lease it to the long poll the worker cut off; nobody takes
  // that lease up, and the api hands the job back, uncounted, after JOB_LEASE.)
  const second = await client.submit("report", { n: 2 });
  release.resolve();
  await within("the patient worker to stop", stopped, 10_000);
  await patientRun;
  const firstDone = await client.wait(first.job_id, { timeoutMs: 5_000 });
  assert.equal(firstDone.status, "SUCCEEDED");
  assert.deepEqual((await client.result(first.job_id)).json(), { shuttingDown: true, by: "patient-1" });
  assert.deepEqual(patientJobs, [first.job_id]);

  // 2. Past the grace: given up, not reported; the job runs again elsewhere.
  const hung = deferred();
  const stopReason = deferred();
  const stubborn = new Worker({ ...options, name: "stubborn-1", shutdownGraceMs: 200 });
  stubborn.kind("report", async (attempt) => {
    attempt.signal.addEventListener("abort", () => stopReason.resolve(attempt.stopReason));
    hung.resolve();
    await new Promise(() => {}); // ignores its signal
  });
  const stubbornRun = stubborn.run();
  defer(t, () => stubborn.stop());
  await within("the second job to start", hung.promise, 10_000);
  const stopAt = Date.now();
  await within("the stubborn worker to give up", stubborn.stop(), 5_000);
  await stubbornRun;
  assert.ok(Date.now() - stopAt < 2_000, "stopped after its grace, not the handler");
  assert.equal(await stopReason.promise, "shutdown");
  assert.equal((await client.job(second.job_id)).status, "RUNNING", "nothing was reported");

  const heir = new Worker({ ...options, name: "heir-1" });
  heir.kind("report", (attempt) => ({ by: "heir-1", attempt: attempt.attempt }));
  const heirRun = heir.run();
  defer(t, () => heir.stop());
  const secondDone = await client.wait(second.job_id, { timeoutMs: 15_000 });
  assert.equal(secondDone.status, "SUCCEEDED");
  assert.equal(secondDone.attempts, 2, "the stubborn worker's attempt and the heir's");
  assert.deepEqual((await client.result(second.job_id)).json(), { by: "heir-1", attempt: 2 });
  await within("the heir to stop", heir.stop(), 10_000);
  await heirRun;
});
