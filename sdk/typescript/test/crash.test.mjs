// (b) A worker killed with SIGKILL mid-job: its lease lapses, a second
// worker runs attempt 2 to SUCCEEDED, and the first attempt's late
// complete is refused (409 attempt-superseded) and changes nothing.

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { Client, Worker } from "@receipt/worker";

import { HERE, defer, raw, startApi, startNode, stopProcess, tempDir, waitFor, within } from "./helpers/support.mjs";

test("a killed worker's attempt is taken over, and its late complete is refused", { timeout: 60_000 }, async (t) => {
  const api = await startApi(t);
  const workKey = await api.createKey({ scope: "work" });
  const dir = tempDir(t);
  const client = new Client({ baseUrl: api.url, key: api.key });
  await client.registerKind("crash-export", {
    timeoutSecs: 60,
    maxAttempts: 3,
    paramsSchema: { type: "object", properties: { month: { type: "string" } }, required: ["month"] },
  });
  const { job_id: jobId } = await client.submit("crash-export", { month: "2026-10" }, { idempotencyKey: "crash-1" });

  const tokenFile = join(dir, "token");
  const doomed = startNode(
    join(HERE, "fixtures", "hanging-worker.mjs"),
    { RECEIPT_URL: api.url, RECEIPT_WORKER_KEY: workKey, KIND: "crash-export", TOKEN_FILE: tokenFile },
    join(dir, "doomed.log"),
  );
  defer(t, () => stopProcess(doomed, { signal: "SIGKILL" }));
  const firstToken = await waitFor("the first worker's handler to start", () => {
    if (doomed.exitCode !== null) throw new Error("the first worker exited");
    return existsSync(tokenFile) ? readFileSync(tokenFile, "utf8") : null;
  }).catch((error) => {
    throw new Error(`${error.message}\nthe first worker's output:\n${doomed.output}`, { cause: error });
  });
  const running = await client.job(jobId);
  assert.equal(running.status, "RUNNING");
  assert.equal(running.attempts, 1);

  const killed = await stopProcess(doomed, { signal: "SIGKILL" });
  assert.equal(killed.signal, "SIGKILL");

  // A second worker takes the job over once the first lease lapses.
  const attempts = [];
  const survivor = new Worker({ baseUrl: api.url, key: workKey, name: "survivor-1", handleSignals: false, logLevel: "warn" });
  survivor.kind("crash-export", (attempt) => {
    attempts.push({ attempt: attempt.attempt, token: attempt.token });
    return { by: "survivor-1", attempt: attempt.attempt };
  });
  const survivorRun = survivor.run();
  defer(t, () => survivor.stop());

  const done = await client.wait(jobId, { timeoutMs: 20_000 });
  assert.equal(done.status, "SUCCEEDED");
  assert.equal(done.attempts, 2, JSON.stringify({ done, attempts }));
  assert.equal(attempts.length, 1);
  assert.equal(attempts[0].attempt, 2);
  assert.notEqual(attempts[0].token, firstToken);
  assert.deepEqual((await client.result(jobId)).json(), { by: "survivor-1", attempt: 2 });

  // The first attempt's complete, late: refused, and nothing changes.
  const late = await raw(api, "POST", `/v1/work/attempts/${encodeURIComponent(firstToken)}/complete`, {
    key: workKey,
    body: { by: "doomed-1", attempt: 1 },
  });
  assert.equal(late.status, 409, late.text);
  assert.equal(late.headers.get("content-type"), "application/problem+json");
  assert.equal(late.json.type, "/problems/attempt-superseded");
  const after = await client.job(jobId);
  assert.equal(after.status, "SUCCEEDED");
  assert.equal(after.attempts, 2);
  assert.equal(after.finished_at, done.finished_at);
  assert.deepEqual((await client.result(jobId)).json(), { by: "survivor-1", attempt: 2 });

  await within("the survivor to stop", survivor.stop(), 10_000);
  await survivorRun;
});
