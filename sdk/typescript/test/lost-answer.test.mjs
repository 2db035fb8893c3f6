// (f) A complete whose answer is lost: a proxy between worker and api
// forwards the first complete of each attempt to the api but closes the
// worker's connection without relaying the answer. The SDK sends the same
// complete again and Receipt answers it as the first: the job SUCCEEDED
// once, with one attempt, one result and one webhook event.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, Worker } from "@receipt/worker";

import { concat, csvPieces } from "./helpers/data.mjs";
import { bodyOfMessage, defer, raw, startApi, startLosingProxy, startWebhookReceiver, waitFor, within } from "./helpers/support.mjs";

test("a complete whose answer was lost is sent again and applies once", { timeout: 60_000 }, async (t) => {
  const api = await startApi(t);
  const workKey = await api.createKey({ scope: "work" });
  const client = new Client({ baseUrl: api.url, key: api.key });
  await client.registerKind("lossy-export", {
    timeoutSecs: 60,
    resultMediaTypes: ["application/json", "text/csv"],
    paramsSchema: { type: "object", properties: { as: { enum: ["json", "csv"] } }, required: ["as"] },
  });
  const receiver = await startWebhookReceiver(t);
  const hook = await client.request("POST", "/v1/webhooks", { json: { url: receiver.url, events: ["job.succeeded"] } });
  assert.equal(hook.status, 201, hook.text());

  const proxy = await startLosingProxy(t, api.port);
  const pieces = csvPieces(4_000);
  const csv = concat(pieces);
  const handled = [];
  const worker = new Worker({ baseUrl: proxy.url, key: workKey, name: "lossy-1", handleSignals: false, logLevel: "error" });
  worker.kind("lossy-export", (attempt) => {
    handled.push(attempt.jobId);
    if (attempt.params.as === "json") return { rows: 3, job: attempt.jobId };
    return worker.stream(
      "text/csv",
      (async function* () {
        yield* pieces;
      })(),
    );
  });
  const running = worker.run();
  defer(t, () => worker.stop());

  const jsonJob = await client.submit("lossy-export", { as: "json" }, { idempotencyKey: "lossy-json" });
  const csvJob = await client.submit("lossy-export", { as: "csv" }, { idempotencyKey: "lossy-csv" });
  const [jsonDone, csvDone] = await Promise.all([jsonJob, csvJob].map((job) => client.wait(job.job_id, { timeoutMs: 20_000 })));

  for (const done of [jsonDone, csvDone]) {
    assert.equal(done.status, "SUCCEEDED");
    assert.equal(done.attempts, 1);
  }
  assert.deepEqual(handled.sort(), [jsonJob.job_id, csvJob.job_id].sort(), "each handler ran once");

  // Each first complete reached the api and its answer was dropped; the
  // SDK's second one, the same bytes, was answered 200 as a replay.
  await waitFor("both completes to be sent again and answered", () => proxy.answered.length >= 2, { timeoutMs: 10_000 });
  assert.equal(proxy.dropped.length, 2);
  assert.equal(proxy.answered.length, 2);
  for (const job of [jsonJob, csvJob]) {
    const dropped = proxy.dropped.find((r) => r.key.includes(job.job_id));
    const again = proxy.answered.find((r) => r.key.includes(job.job_id));
    assert.ok(dropped && again, `both completes of ${job.job_id}`);
    assert.equal(again.key, dropped.key, "the same token");
    assert.ok(bodyOfMessage(again.request).equals(bodyOfMessage(dropped.request)), "the same body");
    assert.match(again.answer.toString("latin1"), /^HTTP\/1\.1 200 /);
    assert.ok(bodyOfMessage(again.answer).equals(bodyOfMessage(dropped.answer)), "answered as the first");
    let answered = JSON.parse(bodyOfMessage(again.answer));
    if (job === jsonJob) {
      // A JSON result goes in a batch of reports: its answer is the batch's.
      assert.equal(again.path, "/v1/work/reports");
      assert.equal(answered.reports.length, 1);
      assert.equal(answered.reports[0].status, 200);
      answered = answered.reports[0].body;
    }
    assert.deepEqual(answered, { job_id: job.job_id, status: "SUCCEEDED" });
  }

  // One result each, the one sent.
  assert.deepEqual((await client.result(jsonJob.job_id)).json(), { rows: 3, job: jsonJob.job_id });
  const csvResult = await raw(api, "GET", `/v1/jobs/${csvJob.job_id}/result`);
  assert.equal(csvResult.headers.get("content-type"), "text/csv");
  assert.ok(Buffer.from(csvResult.bytes).equals(csv), "the csv byte for byte");

  // One job.succeeded event per job.
  await waitFor("a job.succeeded delivery for each job", () => {
    const jobs = new Set(receiver.ofType("job.succeeded").map((d) => d.body.data.job_id));
    return jobs.has(jsonJob.job_id) && jobs.has(csvJob.job_id);
  });

  await within("the worker to stop", worker.stop(), 10_000);
  await running;
  for (const job of [jsonJob, csvJob]) {
    const events = new Set(receiver.ofType("job.succeeded").filter((d) => d.body.data.job_id === job.job_id).map((d) => d.webhookId));
    assert.equal(events.size, 1, `one event for ${job.job_id}`);
  }
});
