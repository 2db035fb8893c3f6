// (a) The README's two examples, compiled with tsc --strict as a user's
// code would be, run a job to SUCCEEDED against the real api; the worker
// example stops cleanly on SIGTERM.

import assert from "node:assert/strict";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  PACKAGE_DIR,
  defer,
  raw,
  readmeExample,
  startApi,
  startNode,
  startProcess,
  stopProcess,
  tempDir,
  within,
} from "./helpers/support.mjs";

/** The examples as a project of their own that depends on @receipt/worker, compiled by tsc. */
async function compileExamples(t, names) {
  const dir = tempDir(t, "receipt-readme-");
  mkdirSync(join(dir, "node_modules", "@receipt"), { recursive: true });
  symlinkSync(PACKAGE_DIR, join(dir, "node_modules", "@receipt", "worker"), "dir");
  const sources = names.map((name) => {
    const file = join(dir, name.replace(/\.ts$/, ".mts"));
    writeFileSync(file, readmeExample(name));
    return file;
  });
  const tsc = startProcess(
    process.execPath,
    [
      join(PACKAGE_DIR, "node_modules", "typescript", "bin", "tsc"),
      "--strict",
      "--target", "ES2022",
      "--module", "NodeNext",
      "--moduleResolution", "NodeNext",
      "--typeRoots", join(PACKAGE_DIR, "node_modules", "@types"),
      "--types", "node",
      "--skipLibCheck",
      "--outDir", dir,
      ...sources,
    ],
    { cwd: dir, stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  tsc.stdout.on("data", (data) => (out += data));
  tsc.stderr.on("data", (data) => (out += data));
  const { code } = await within("tsc", tsc.exited, 60_000);
  assert.equal(code, 0, `the README's examples do not compile:\n${out}`);
  return dir;
}

test("the README's examples run a job to SUCCEEDED", { timeout: 60_000 }, async (t) => {
  const [api, dir] = await Promise.all([startApi(t), compileExamples(t, ["worker.ts", "submit.ts"])]);
  const workKey = await api.createKey({ scope: "work" });

  const worker = startNode(
    join(dir, "worker.mjs"),
    { RECEIPT_URL: api.url, RECEIPT_WORKER_KEY: workKey },
    join(dir, "worker.log"),
  );
  defer(t, () => stopProcess(worker, { signal: "SIGKILL" }));

  const submit = startNode(join(dir, "submit.mjs"), { RECEIPT_URL: api.url, RECEIPT_KEY: api.key }, join(dir, "submit.log"));
  const { code } = await within("the submit example to end", submit.exited, 45_000);
  assert.equal(code, 0, `the submit example failed:\n${submit.output}\nworker:\n${worker.output}`);
  assert.match(submit.output, /^SUCCEEDED \{"month":"2026-10","rows":3\}$/m);

  const jobs = (await raw(api, "GET", "/v1/jobs?kind=sales-export")).json.data;
  assert.equal(jobs.length, 1);
  assert.equal(jobs[0].status, "SUCCEEDED");
  assert.equal(jobs[0].attempts, 1);
  assert.equal(jobs[0].progress, 1);

  // SIGTERM: the long poll is cut off, run() resolves, the process ends by itself.
  const exit = await within("the worker example to stop on SIGTERM", stopProcess(worker), 10_000);
  assert.deepEqual([exit.code, exit.signal], [0, null], `the worker example did not exit cleanly:\n${worker.output}`);
  assert.match(worker.output, /worker reports-1: stopped/);
});
