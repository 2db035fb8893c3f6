// A scripted stand-in for the api, for what the real one cannot be made to
// do on demand (answer 503, 429, cut a connection, lose a lease, answer a
// heartbeat 409). Each request is recorded; `route(request)` answers it.

import { once } from "node:events";
import { createServer } from "node:http";

import { defer } from "./support.mjs";

/**
 * Starts a fake api; `route({method, path, headers, body, text, json})`
 * answers {status, headers?, json?} or "cut" (the connection is closed
 * without an answer) or "hold" (no answer until the client goes away).
 */
export async function startFakeApi(t, route) {
  const requests = [];
  // Batches of reports (`POST /v1/work/reports`): each report in one is
  // recorded and routed as its own call; an answer worth a retry (a cut, a
  // 408, a 429, a 5xx) or a hold answers the whole batch, as an outage of
  // the api would.
  const batches = [];
  const answerOne = async (record) => {
    try {
      return await route(record);
    } catch (error) {
      return { status: 500, json: { type: "/problems/internal-error", title: "x", status: 500, detail: String(error) } };
    }
  };
  const answerReports = async (batch) => {
    const answers = [];
    for (const { outcome, token, traceparent, ...rest } of batch.json.reports) {
      const text = outcome === "complete" ? JSON.stringify(rest.result) : outcome === "fail" ? JSON.stringify(rest) : "";
      const headers = { ...batch.headers, "content-type": "application/json" };
      if (traceparent) headers.traceparent = traceparent;
      const record = {
        method: "POST",
        path: `/v1/work/attempts/${token}/${outcome}`,
        query: new URLSearchParams(),
        headers,
        body: Buffer.from(text),
        text,
        json: text ? JSON.parse(text) : undefined,
        at: Date.now(),
      };
      requests.push(record);
      const answer = await answerOne(record);
      if (answer === "cut" || answer === "hold" || answer.status === 408 || answer.status === 429 || answer.status >= 500) {
        return answer;
      }
      answers.push({ token, status: answer.status, body: answer.json ?? null });
    }
    return { status: 200, json: { reports: answers } };
  };
  const sockets = new Set();
  const server = createServer((request, response) => {
    const parts = [];
    request.on("data", (data) => parts.push(data));
    request.on("end", async () => {
      const body = Buffer.concat(parts);
      const text = body.toString("utf8");
      let json;
      try {
        json = text ? JSON.parse(text) : undefined;
      } catch {
        json = undefined;
      }
      const url = new URL(request.url, "http://fake");
      const record = { method: request.method, path: url.pathname, query: url.searchParams, headers: request.headers, body, text, json, at: Date.now() };
      let answer;
      if (record.path === "/v1/work/reports") {
        batches.push(record);
        answer = await answerReports(record);
      } else {
        requests.push(record);
        answer = await answerOne(record);
      }
      if (answer === "cut") {
        request.socket.destroy();
        return;
      }
      if (answer === "hold") return;
      const payload = answer.json === undefined ? "" : JSON.stringify(answer.json);
      const isProblem = answer.status >= 400;
      response.writeHead(answer.status, {
        "content-type": isProblem ? "application/problem+json" : "application/json",
        "content-length": Buffer.byteLength(payload),
        ...(answer.headers ?? {}),
      });
      response.end(payload);
    });
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const close = () =>
    new Promise((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    });
  defer(t, close);
  return { url: `http://127.0.0.1:${server.address().port}`, requests, batches, close };
}

export function problem(status, type, detail = "") {
  return { status, json: { type, title: "", status, detail } };
}

/** An attempt as a lease answers it, its lease `leaseMs` and deadline `deadlineMs` from now. */
export function leased(n, { kind = "fake-kind", leaseMs = 2_000, deadlineMs = 60_000, params = {}, traceparent } = {}) {
  const now = Date.now();
  const item = {
    token: `job_fake${n}.1`,
    job_id: `job_fake${n}`,
    kind,
    attempt: 1,
    max_attempts: 3,
    params,
    priority: "normal",
    lease_expires_at: new Date(now + leaseMs).toISOString(),
    deadline: new Date(now + deadlineMs).toISOString(),
  };
  if (traceparent) item.traceparent = traceparent;
  return item;
}

export function heartbeatOk(leaseMs = 2_000, { cancel = false } = {}) {
  return {
    status: 200,
    json: {
      cancel_requested: cancel,
      lease_expires_at: new Date(Date.now() + leaseMs).toISOString(),
      deadline: new Date(Date.now() + 60_000).toISOString(),
    },
  };
}
