#!/usr/bin/env node
// The usual stack's api: Fastify, node-postgres and a BullMQ queue, with
// Receipt's HTTP contract for `sleep` jobs as far as a client needs it:
// POST /v1/reports/sleep (Idempotency-Key, {"ms": N}) answers 202 with the
// job; GET /v1/jobs/{id} (with ?wait= long polls) answers the job.
//
// A submit stores the key and the job in one transaction, then adds the
// job to BullMQ: the way such a service is usually built. A crash between
// the commit and the add leaves a job QUEUED that no worker will ever see
// (Receipt's outbox is what closes that gap); the bench does not crash it.
import { createHash, randomBytes } from "node:crypto";
import Fastify from "fastify";
import { Queue } from "bullmq";
import { QUEUE, SCHEMA, connection, pool, settings } from "./common.mjs";

const tenants = new Map(
  (process.env.API_KEYS ?? "")
    .split(",")
    .filter(Boolean)
    .map((pair) => {
      const at = pair.indexOf(":");
      return [pair.slice(at + 1), pair.slice(0, at)];
    }),
);
const FINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
const LONGEST_WAIT_S = 60;

await pool.query(SCHEMA);
const queue = new Queue(QUEUE, { connection, prefix: settings.prefix });
await queue.waitUntilReady();

// Time-ordered ids like Receipt's (`job_` and 32 hex digits), increasing
// within this process.
let lastMs = 0;
let counter = 0;
function newJobId() {
  const now = Math.max(Date.now(), lastMs);
  counter = now === lastMs ? counter + 1 : 0;
  lastMs = now;
  return (
    "job_" +
    now.toString(16).padStart(12, "0") +
    counter.toString(16).padStart(8, "0") +
    randomBytes(6).toString("hex")
  );
}

function jobObject(row) {
  const at = (t) => (t ? t.toISOString() : null);
  return {
    job_id: row.job_id,
    kind: row.kind,
    params: row.params,
    status: row.status,
    attempts: row.attempts,
    progress: row.status === "SUCCEEDED" ? 1 : null,
    created_at: at(row.created_at),
    started_at: at(row.started_at),
    finished_at: at(row.finished_at),
    result_url: null,
    error: null,
    cancel_requested: false,
    next_attempt_at: null,
    retry_of: null,
    schedule_id: null,
    priority: "normal",
    waiting: null,
  };
}

function problem(reply, status, detail, extra = {}) {
  return reply
    .code(status)
    .type("application/problem+json")
    .send({ type: "about:blank", title: String(status), status, detail, ...extra });
}

const app = Fastify({ logger: false });

app.addHook("onRequest", async (request, reply) => {
  const header = request.headers.authorization ?? "";
  const tenant = header.startsWith("Bearer ") ? tenants.get(header.slice(7)) : undefined;
  if (!tenant) {
    reply.header("WWW-Authenticate", "Bearer");
    return problem(reply, 401, "a valid API key is required");
  }
  request.tenant = tenant;
});

app.post("/v1/reports/:kind", async (request, reply) => {
  if (request.params.kind !== "sleep") {
    return problem(reply, 404, `no report kind ${request.params.kind}`);
  }
  const params = request.body;
  const fields = params && typeof params === "object" && !Array.isArray(params) ? Object.keys(params) : [];
  if (fields.length !== 1 || fields[0] !== "ms" || !Number.isInteger(params.ms) || params.ms < 0 || params.ms > 60000) {
    return problem(reply, 422, "the body is {\"ms\": a whole number from 0 to 60000}", {
      errors: [{ field: "ms", message: "a whole number from 0 to 60000" }],
    });
  }
  const key = request.headers["idempotency-key"];
  const hash = createHash("sha256").update(JSON.stringify({ ms: params.ms })).digest("hex");
  const client = await pool.connect();
  let job;
  let replayed = false;
  try {
    await client.query("BEGIN");
    const jobId = newJobId();
    // A second request with the same key waits here for the first to
    // commit, then finds its row: the same job, never a second one.
    const claimed = key
      ? await client.query(
          "INSERT INTO idempotency_keys (tenant_id, key, request_hash, job_id) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
          [request.tenant, key, hash, jobId],
        )
      : { rowCount: 1 };
    if (claimed.rowCount === 0) {
      const seen = await client.query(
        "SELECT k.request_hash, j.* FROM idempotency_keys k JOIN jobs j ON j.job_id = k.job_id WHERE k.tenant_id = $1 AND k.key = $2",
        [request.tenant, key],
      );
      await client.query("COMMIT");
      if (seen.rows[0].request_hash !== hash) {
        return problem(reply, 422, "the Idempotency-Key was used with another request", {
          errors: [{ field: "Idempotency-Key", message: "used with another request" }],
        });
      }
      job = seen.rows[0];
      replayed = true;
    } else {
      const made = await client.query(
        "INSERT INTO jobs (job_id, tenant_id, kind, params, status) VALUES ($1, $2, 'sleep', $3, 'QUEUED') RETURNING *",
        [jobId, request.tenant, params],
      );
      await client.query("COMMIT");
      job = made.rows[0];
    }
  } catch (error) {
    await client.query("ROLLBACK").catch(() => {});
    throw error;
  } finally {
    client.release();
  }
  if (!replayed) {
    try {
      await queue.add(
        "sleep",
        { job_id: job.job_id },
        { jobId: job.job_id, removeOnComplete: true, removeOnFail: true },
      );
    } catch (error) {
      request.log.error(error);
      return problem(reply, 503, "the queue is unavailable");
    }
  } else {
    reply.header("Idempotent-Replayed", "true");
  }
  reply.header("Location", `/v1/jobs/${job.job_id}`);
  return reply.code(202).send(jobObject(job));
});

app.get("/v1/jobs/:id", async (request, reply) => {
  const wait = Math.min(Number(request.query.wait ?? 0) || 0, LONGEST_WAIT_S);
  const until = Date.now() + wait * 1000;
  for (;;) {
    const found = await pool.query("SELECT * FROM jobs WHERE job_id = $1 AND tenant_id = $2", [
      request.params.id,
      request.tenant,
    ]);
    if (found.rowCount === 0) {
      return problem(reply, 404, `no job ${request.params.id}`);
    }
    const job = found.rows[0];
    if (FINAL.has(job.status) || Date.now() >= until) {
      return reply.send(jobObject(job));
    }
    // A long poll looks again every 100 ms: no notification, as usual.
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
});

const [host, port] = settings.bind.split(":");
const address = await app.listen({ host, port: Number(port) });
console.log(`listening on ${address}`);

for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, async () => {
    await app.close();
    await queue.close();
    await pool.end();
    process.exit(0);
  });
}
