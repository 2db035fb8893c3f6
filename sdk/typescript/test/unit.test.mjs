// The SDK against a scripted stand-in for the api (test/helpers/fake-api.mjs),
// for what the real api cannot be made to do on demand, and its pure parts.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  ApiError,
  Client,
  ConnectionFailed,
  Permanent,
  Retryable,
  VERSION,
  Worker,
  failureOf,
  stream,
} from "@receipt/worker";

import { heartbeatOk, leased, problem, startFakeApi } from "./helpers/fake-api.mjs";
import { PACKAGE_DIR, deferred, defer, waitFor, within } from "./helpers/support.mjs";

const quiet = { handleSignals: false, logLevel: "silent" };
const fast = { firstBackoffMs: 10, maxBackoffMs: 50, deadlineMs: 10_000 };

/** A worker on a fake api; stopped when the test ends. */
function startWorker(t, url, options, kinds) {
  const worker = new Worker({ baseUrl: url, key: "rk_fake", name: "unit-1", retry: fast, ...quiet, ...options });
  for (const [kind, handler] of Object.entries(kinds)) worker.kind(kind, handler);
  const running = worker.run();
  defer(t, () => worker.stop());
  return { worker, running };
}

/** A lease route that hands out `items` once, then holds the long poll a little and answers none. */
function leases(items) {
  const queue = [...items];
  return async () => {
    if (queue.length > 0) return { status: 200, json: { attempts: queue.splice(0) } };
    await new Promise((resolve) => setTimeout(resolve, 200));
    return { status: 200, json: { attempts: [] } };
  };
}

const reports = (api) => api.requests.filter((r) => /\/(complete|fail|cancelled)$/.test(r.path));

test("a call is tried again on 429 (after its Retry-After), 5xx and a cut connection, with the same body and key", async (t) => {
  let n = 0;
  const api = await startFakeApi(t, () => {
    n += 1;
    if (n === 1) return { ...problem(429, "/problems/too-many-requests"), headers: { "retry-after": "1" } };
    if (n === 2) return problem(503, "/problems/service-unavailable");
    if (n === 3) return "cut";
    return { status: 202, json: { job_id: "job_1", status: "QUEUED" } };
  });
  const client = new Client({ baseUrl: api.url, key: "rk_full", retry: fast });
  const job = await client.submit("sales-export", { month: "2026-10" });
  assert.equal(job.job_id, "job_1");
  assert.equal(api.requests.length, 4);
  const [first, ...others] = api.requests;
  assert.ok(first.headers["idempotency-key"]);
  for (const request of others) {
    assert.equal(request.text, first.text);
    assert.equal(request.headers["idempotency-key"], first.headers["idempotency-key"]);
    assert.equal(request.headers.authorization, "Bearer rk_full");
  }
  assert.ok(api.requests[1].at - first.at >= 990, "the Retry-After was waited for");
});

test("a refusal is not tried again and throws its problem; a service never reached throws ConnectionFailed", async (t) => {
  const api = await startFakeApi(t, () => ({
    status: 422,
    json: { type: "/problems/validation-error", title: "Unprocessable Entity", status: 422, detail: "bad", errors: [{ field: "month", message: "no" }] },
  }));
  const client = new Client({ baseUrl: api.url, key: "rk_full", retry: fast });
  const error = await client.submit("sales-export", { month: "x" }).catch((e) => e);
  assert.ok(error instanceof ApiError);
  assert.equal(error.status, 422);
  assert.equal(error.type, "/problems/validation-error");
  assert.deepEqual(error.errors, [{ field: "month", message: "no" }]);
  assert.equal(api.requests.length, 1);

  await api.close();
  const gone = new Client({ baseUrl: api.url, key: "rk_full", retry: { ...fast, deadlineMs: 200 } });
  const failed = await gone.job("job_1").catch((e) => e);
  assert.ok(failed instanceof ConnectionFailed, String(failed));
});

test("the lease asks for the free slots with wait_secs 30; stop() cuts its long poll off", async (t) => {
  const release = deferred();
  let leaseCount = 0;
  const api = await startFakeApi(t, async (r) => {
    if (r.path === "/v1/work/lease") {
      leaseCount += 1;
      if (leaseCount === 1) return { status: 200, json: { attempts: [leased(1), leased(2)] } };
      return "hold";
    }
    if (r.path.endsWith("/heartbeat")) return heartbeatOk();
    if (r.path.endsWith("/complete")) return { status: 200, json: { status: "SUCCEEDED" } };
    return problem(404, "/problems/not-found");
  });
  const { worker, running } = startWorker(t, api.url, { concurrency: 3 }, { "fake-kind": () => release.promise });
  await waitFor("the second lease", () => api.requests.filter((r) => r.path === "/v1/work/lease").length === 2);
  const [first, second] = api.requests.filter((r) => r.path === "/v1/work/lease");
  assert.deepEqual(first.json, { worker: "unit-1", kinds: ["fake-kind"], max: 3, wait_secs: 30 });
  assert.deepEqual(second.json, { worker: "unit-1", kinds: ["fake-kind"], max: 1, wait_secs: 30 });
  assert.equal(worker.holding, 2);

  const stopped = worker.stop();
  release.resolve({ ok: true }); // the running handlers end within the grace, and are reported
  await within("stop() to resolve", stopped, 5_000);
  await running;
  assert.equal(reports(api).length, 2);
  assert.ok(reports(api).every((r) => r.path.endsWith("/complete") && r.text === '{"ok":true}'));
});

test("a heartbeat answered 409 aborts the handler's signal and nothing is reported", async (t) => {
  let beats = 0;
  const lease = leases([leased(1)]);
  const api = await startFakeApi(t, async (r) => {
    if (r.path === "/v1/work/lease") return lease();
    if (r.path.endsWith("/heartbeat")) {
      beats += 1;
      return beats === 1 ? heartbeatOk() : problem(409, "/problems/attempt-superseded", "lapsed");
    }
    return { status: 200, json: {} };
  });
  const stopped = deferred();
  const { worker, running } = startWorker(t, api.url, { heartbeatEveryMs: 50 }, {
    "fake-kind": (attempt) =>
      new Promise((_, reject) =>
        attempt.signal.addEventListener("abort", () => {
          stopped.resolve(attempt.stopReason);
          reject(attempt.signal.reason);
        }),
      ),
  });
  assert.equal(await within("the handler's signal to abort", stopped.promise, 5_000), "lost");
  await waitFor("the attempt to be let go", () => worker.holding === 0, { timeoutMs: 5_000 });
  await worker.stop();
  await running;
  assert.deepEqual(reports(api), []);
  assert.equal(beats, 2, "no heartbeat after the 409");
});

test("a report answered 409 is final; one answered 503 or cut is sent again, the same", async (t) => {
  let completes = 0;
  const lease = leases([leased(1), leased(2)]);
  const api = await startFakeApi(t, async (r) => {
    if (r.path === "/v1/work/lease") return lease();
    if (r.path.endsWith("/heartbeat")) return heartbeatOk();
    if (r.path === "/v1/work/attempts/job_fake1.1/complete") return problem(409, "/problems/attempt-ended", "ended");
    if (r.path === "/v1/work/attempts/job_fake2.1/complete") {
      completes += 1;
      if (completes === 1) return problem(503, "/problems/service-unavailable");
      if (completes === 2) return "cut";
      return { status: 200, json: { status: "SUCCEEDED" } };
    }
    return problem(404, "/problems/not-found");
  });
  const { worker, running } = startWorker(t, api.url, {}, { "fake-kind": (attempt) => ({ job: attempt.jobId }) });
  await waitFor("the attempts to be reported", () => completes === 3 && worker.holding === 0, { timeoutMs: 5_000 });
  await worker.stop();
  await running;
  const one = reports(api).filter((r) => r.path.includes("job_fake1"));
  assert.equal(one.length, 1, "the 409 was not sent again");
  const two = reports(api).filter((r) => r.path.includes("job_fake2"));
  assert.equal(two.length, 3);
  assert.ok(two.every((r) => r.text === '{"job":"job_fake2"}' && r.headers["content-type"] === "application/json"));
});

test("a slot is free while its report is on its way, up to twice the slots held", async (t) => {
  const queue = [1, 2, 3].map((n) => leased(n, { params: { n } }));
  let leaseCount = 0;
  const ran = [];
  let refusedAfterSecond = 0;
  let release = false;
  const api = await startFakeApi(t, async (r) => {
    if (r.path === "/v1/work/lease") {
      leaseCount += 1;
      if (queue.length > 0) return { status: 200, json: { attempts: queue.splice(0, r.json.max) } };
      await new Promise((resolve) => setTimeout(resolve, 200));
      return { status: 200, json: { attempts: [] } };
    }
    if (r.path.endsWith("/heartbeat")) return heartbeatOk();
    // The first attempt's report meets an outage until released.
    if (r.path === "/v1/work/attempts/job_fake1.1/complete" && !release) {
      if (ran.includes(2)) refusedAfterSecond += 1;
      return problem(503, "/problems/service-unavailable");
    }
    if (r.path.endsWith("/complete")) return { status: 200, json: { status: "SUCCEEDED" } };
    return problem(404, "/problems/not-found");
  });
  const { worker, running } = startWorker(t, api.url, { concurrency: 1 }, {
    "fake-kind": (attempt) => {
      ran.push(attempt.params.n);
      return { n: attempt.params.n };
    },
  });
  // One slot: the second attempt runs while the first is reported.
  await waitFor("the second attempt run", () => ran.includes(2), { timeoutMs: 5_000 });
  // Two held (one reporting, one waiting to): no third lease, however
  // often the first report is tried meanwhile.
  await waitFor("the first report refused twice more", () => refusedAfterSecond >= 2, { timeoutMs: 5_000 });
  assert.deepEqual(ran, [1, 2]);
  assert.equal(leaseCount, 2);
  assert.equal(worker.holding, 2);
  release = true;
  await waitFor("every attempt run and reported", () => ran.length === 3 && worker.holding === 0, { timeoutMs: 5_000 });
  await worker.stop();
  await running;
  assert.deepEqual(ran, [1, 2, 3]);
});

test("results that cannot be sent, and streams that fail, are reported as failures", async (t) => {
  const lease = leases([1, 2, 3, 4, 5].map((n) => leased(n, { params: { n } })));
  const api = await startFakeApi(t, async (r) => {
    if (r.path === "/v1/work/lease") return lease();
    if (r.path.endsWith("/heartbeat")) return heartbeatOk();
    if (r.path.endsWith("/complete") && r.headers["content-type"] === "application/x-undeclared") {
      return problem(415, "/problems/unsupported-media-type", "text/csv only");
    }
    return { status: 200, json: {} };
  });
  class SalesDbDown extends Error {
    name = "SalesDbDown";
  }
  const { worker, running } = startWorker(t, api.url, { concurrency: 5 }, {
    "fake-kind": (attempt) => {
      switch (attempt.params.n) {
        case 1:
          return new Uint8Array([1, 2, 3]); // bytes, not wrapped
        case 2:
          return stream("application/x-undeclared", "a,b\n");
        case 3:
          return stream(
            "text/csv",
            (async function* () {
              yield "a,b\n";
              throw new SalesDbDown("lost the cursor");
            })(),
          );
        case 4:
          return stream(
            "text/csv",
            (async function* () {
              yield "a,b\n";
              throw new Permanent("region gone", { errorType: "bad_region" });
            })(),
          );
        default:
          return { big: 1n }; // not JSON
      }
    },
  });
  await waitFor("five failures", () => api.requests.filter((r) => r.path.endsWith("/fail")).length === 5, { timeoutMs: 5_000 });
  await worker.stop();
  await running;
  const fail = (n) => api.requests.find((r) => r.path === `/v1/work/attempts/job_fake${n}.1/fail`).json;
  assert.equal(fail(1).error_type, "invalid_result");
  assert.equal(fail(1).retryable, false);
  assert.equal(fail(2).error_type, "invalid_result");
  assert.match(fail(2).message, /application\/x-undeclared/);
  assert.deepEqual(fail(3), { retryable: true, error_type: "SalesDbDown", message: "lost the cursor" });
  assert.deepEqual(fail(4), { retryable: false, error_type: "bad_region", message: "region gone" });
  assert.equal(fail(5).error_type, "invalid_result");
});

test("with OpenTelemetry, the attempt's span continues the lease's traceparent and the reports carry it", async (t) => {
  const remote = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  const lease = leases([leased(1, { traceparent: remote })]);
  const api = await startFakeApi(t, async (r) => {
    if (r.path === "/v1/work/lease") return lease();
    if (r.path.endsWith("/heartbeat")) return heartbeatOk();
    return { status: 200, json: {} };
  });
  const spans = [];
  const ROOT = Object.freeze({});
  let current = ROOT;
  const otel = {
    ROOT_CONTEXT: ROOT,
    SpanKind: { CONSUMER: 4 },
    SpanStatusCode: { ERROR: 2 },
    trace: {
      getTracer: (name, version) => ({
        startSpan(spanName, options, parent) {
          const span = {
            tracer: { name, version },
            name: spanName,
            options,
            parent,
            attributes: {},
            ended: false,
            spanContext: () => ({ traceId: parent.remote.traceId, spanId: "1111222233334444", traceFlags: 1 }),
            setAttribute(key, value) {
              this.attributes[key] = value;
            },
            recordException() {},
            setStatus() {},
            end() {
              this.ended = true;
            },
          };
          spans.push(span);
          return span;
        },
      }),
      setSpan: (context, span) => ({ ...context, span }),
      setSpanContext: (context, remoteContext) => ({ ...context, remote: remoteContext }),
    },
    context: {
      active: () => current,
      with(context, fn) {
        current = context;
        try {
          return fn();
        } finally {
          current = ROOT;
        }
      },
    },
  };
  let inside;
  const { worker, running } = startWorker(t, api.url, { openTelemetry: otel }, {
    "fake-kind": () => {
      inside = current;
      return { ok: true };
    },
  });
  await waitFor("the complete", () => reports(api).length === 1, { timeoutMs: 5_000 });
  await worker.stop();
  await running;
  assert.equal(spans.length, 1);
  const [span] = spans;
  assert.equal(span.name, "receipt.attempt fake-kind");
  assert.equal(span.tracer.name, "@receipt/worker");
  assert.equal(span.options.kind, 4);
  assert.deepEqual(span.parent.remote, {
    traceId: "0af7651916cd43dd8448eb211c80319c",
    spanId: "b7ad6b7169203331",
    traceFlags: 1,
    isRemote: true,
  });
  assert.equal(span.attributes["receipt.outcome"], "complete");
  assert.equal(span.options.attributes["receipt.job_id"], "job_fake1");
  assert.ok(span.ended);
  assert.equal(inside.span, span, "the handler runs in the span's context");
  assert.equal(reports(api)[0].headers.traceparent, "00-0af7651916cd43dd8448eb211c80319c-1111222233334444-01");
});

test("how errors become failures", () => {
  assert.deepEqual(failureOf(new Retryable("slow", { errorType: "db timeout!" })), {
    retryable: true,
    error_type: "db_timeout_",
    message: "slow",
  });
  assert.deepEqual(failureOf(new Permanent("gone")), { retryable: false, error_type: "error", message: "gone" });
  assert.deepEqual(failureOf(new TypeError("x is undefined")), { retryable: true, error_type: "TypeError", message: "x is undefined" });
  assert.equal(failureOf("a string").error_type, "error");
  assert.equal(failureOf(new Error("m".repeat(5000))).message.length, 4096);
  assert.throws(() => stream("csv", "a"), TypeError);
  assert.throws(() => stream("text/csv", 42), TypeError);
});

test("VERSION is package.json's", () => {
  const pkg = JSON.parse(readFileSync(join(PACKAGE_DIR, "package.json"), "utf8"));
  assert.equal(VERSION, pkg.version);
});

test("the server's clock is trusted within what its Date header can say", async () => {
  const { ServerClock } = await import("../dist/http.js");
  const clock = new ServerClock();
  const at = (ms) => new Headers({ date: new Date(ms).toUTCString() });
  const now = Date.now();
  clock.observe(at(now - 1_500)); // a Date a second and a half old: the same clock
  assert.equal(clock.offsetMs, 0);
  clock.observe(at(now + 60_000)); // a server a minute ahead
  assert.ok(Math.abs(clock.offsetMs - 61_000) < 2_000, String(clock.offsetMs));
  assert.ok(Math.abs(clock.local(new Date(now + 61_000).toISOString()) - now) < 2_000);
  clock.observe(at(now));
  assert.equal(clock.offsetMs, 0);
});
