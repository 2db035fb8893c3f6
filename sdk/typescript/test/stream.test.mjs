// (e) A streamed result (text/csv, a few hundred KiB from an async
// iterable) is served back byte for byte, with its media type.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";

import { Client, Worker } from "@receipt/worker";

import { concat, csvPieces } from "./helpers/data.mjs";
import { defer, raw, startApi, within } from "./helpers/support.mjs";

test("a streamed text/csv result is served back byte for byte", { timeout: 60_000 }, async (t) => {
  const api = await startApi(t);
  const workKey = await api.createKey({ scope: "work" });
  const client = new Client({ baseUrl: api.url, key: api.key });
  await client.registerKind("csv-export", {
    timeoutSecs: 60,
    resultMediaTypes: ["text/csv"],
    paramsSchema: { type: "object" },
  });

  const pieces = csvPieces();
  const expected = concat(pieces);
  assert.ok(expected.length > 300 * 1024, `${expected.length} bytes`);

  const worker = new Worker({ baseUrl: api.url, key: workKey, name: "csv-1", handleSignals: false, logLevel: "warn" });
  worker.kind("csv-export", (attempt) => {
    async function* rows() {
      for (let i = 0; i < pieces.length; i += 1) {
        if (i % 500 === 0) {
          attempt.progress(i / pieces.length);
          await new Promise((resolve) => setImmediate(resolve));
        }
        yield pieces[i];
      }
    }
    return worker.stream("text/csv", rows());
  });
  const running = worker.run();
  defer(t, () => worker.stop());

  const { job_id: jobId } = await client.submit("csv-export", {});
  const done = await client.wait(jobId, { timeoutMs: 20_000 });
  assert.equal(done.status, "SUCCEEDED");
  assert.equal(done.attempts, 1);

  const result = await raw(api, "GET", `/v1/jobs/${jobId}/result`);
  assert.equal(result.status, 200);
  assert.equal(result.headers.get("content-type"), "text/csv");
  assert.equal(result.bytes.length, expected.length);
  assert.equal(
    createHash("sha256").update(result.bytes).digest("hex"),
    createHash("sha256").update(expected).digest("hex"),
  );
  assert.ok(Buffer.from(result.bytes).equals(expected));
  // The same through the Client.
  const viaClient = await client.result(jobId);
  assert.equal(viaClient.contentType, "text/csv");
  assert.ok(Buffer.from(viaClient.bytes).equals(expected));

  await within("the worker to stop", worker.stop(), 10_000);
  await running;
});
