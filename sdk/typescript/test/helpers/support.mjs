// What the integration tests share: the real api, started as a user would
// (embedded, SQLite, one process), keys made with its command line, a
// webhook receiver, a proxy that loses answers, child processes, and
// waiting for events with deadlines.

import { spawn } from "node:child_process";
import { once } from "node:events";
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { connect, createServer as createTcpServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The test folder. */
export const HERE = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const PACKAGE_DIR = resolve(HERE, "..");
const REPO = resolve(PACKAGE_DIR, "..", "..");
export const API_BIN = process.env.RECEIPT_API_BIN || join(REPO, "target", "debug", "api");

// --- processes ---------------------------------------------------------------

const children = new Set();
process.on("exit", () => {
  // A test that died before its cleanup leaves nothing running behind it.
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
});

/** Starts a process; it is SIGKILLed at the latest when this test process exits. */
export function startProcess(command, args, options) {
  const child = spawn(command, args, options);
  children.add(child);
  child.exited = new Promise((resolve) => {
    child.once("exit", (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    });
    child.once("error", (error) => {
      children.delete(child);
      resolve({ code: null, signal: null, error });
    });
  });
  return child;
}

/** Sends `signal` and waits for the exit; SIGKILL after `timeoutMs`. */
export async function stopProcess(child, { signal = "SIGTERM", timeoutMs = 15_000 } = {}) {
  if (child.exitCode !== null || child.signalCode !== null) return child.exited;
  child.kill(signal);
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  try {
    return await child.exited;
  } finally {
    clearTimeout(timer);
  }
}

const stacks = new WeakMap();

/**
 * Runs `fn` when the test `t` ends, passed or failed: the last deferred
 * first, as a stack unwinds.
 */
export function defer(t, fn) {
  let stack = stacks.get(t);
  if (!stack) {
    stack = [];
    stacks.set(t, stack);
    t.after(async () => {
      const errors = [];
      while (stack.length > 0) {
        try {
          await stack.pop()();
        } catch (error) {
          errors.push(error);
        }
      }
      if (errors.length > 0) throw errors[0];
    });
  }
  stack.push(fn);
}

/** A temp dir of the test's own, removed when the test ends. */
export function tempDir(t, prefix = "receipt-ts-") {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  defer(t, () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// --- waiting -------------------------------------------------------------------

/**
 * Polls `check` until it answers something truthy, which it returns;
 * fails naming `what` (and the last answer) after `timeoutMs`.
 */
export async function waitFor(what, check, { timeoutMs = 20_000, intervalMs = 50 } = {}) {
  const until = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await check();
    if (last) return last;
    if (Date.now() >= until) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(last)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** A promise with its resolve and reject. */
export function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** `promise`, or a failure naming `what` after `timeoutMs`. */
export async function within(what, promise, timeoutMs = 20_000) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

// --- the api -------------------------------------------------------------------

const BASE_ENV = {
  BIND_ADDR: "127.0.0.1:0",
  EMBEDDED_WORKER: "true",
  JOB_LEASE: "2s",
  RETRY_BASE_DELAY: "50ms",
  RETRY_MAX_DELAY: "200ms",
  SHUTDOWN_GRACE: "2s",
  RUST_LOG: "warn",
  WEBHOOK_ALLOW_PRIVATE: "true",
};

/** The JOB_LEASE the tests' api runs with, in ms. */
export const JOB_LEASE_MS = 2_000;

const KEY_LINE = /API key: (rk_[0-9a-f]+)/;
const LISTEN_LINE = /listening on (http:\/\/\S+)/;

/**
 * Starts the api binary in a temp dir of its own; it is stopped (SIGTERM,
 * then waited for) when the test ends. Answers {url, port, key, env, dir,
 * createKey(), stop()}.
 */
export async function startApi(t, extraEnv = {}) {
  if (!existsSync(API_BIN)) throw new Error(`no api binary at ${API_BIN}: build it, or set RECEIPT_API_BIN`);
  const dir = tempDir(t, "receipt-api-");
  const env = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (name === "API_KEYS" || name.startsWith("OTEL_") || name.startsWith("RECEIPT_") || name.startsWith("MAX_")) continue;
    env[name] = value;
  }
  Object.assign(env, BASE_ENV, { DATABASE_URL: `sqlite://${dir}/jobs.db` }, extraEnv);
  const child = startProcess(API_BIN, [], { cwd: dir, env, stdio: ["ignore", "pipe", "pipe"] });
  child.stderr.pipe(createWriteStream(join(dir, "api.stderr")));
  const stdoutCopy = createWriteStream(join(dir, "api.stdout"));
  const api = { dir, env, child, url: "", key: "", port: 0 };
  const lines = createInterface({ input: child.stdout });
  const ready = new Promise((resolve, reject) => {
    lines.on("line", (line) => {
      stdoutCopy.write(`${line}\n`);
      const key = KEY_LINE.exec(line);
      if (key && !api.key) api.key = key[1];
      const listen = LISTEN_LINE.exec(line);
      if (listen) api.url = listen[1].replace(/\/+$/, "");
      if (api.key && api.url) resolve();
    });
    child.exited.then(({ code, signal }) => reject(new Error(`the api exited (${code ?? signal}) before it was ready`)));
  });
  const stop = async () => {
    const exit = await stopProcess(child);
    stdoutCopy.end();
    return exit;
  };
  // Registered before the wait, so that the api stops even when it never got ready.
  defer(t, stop);
  try {
    await within("the api to start", ready, 30_000);
  } catch (error) {
    await stop();
    const stderr = existsSync(join(dir, "api.stderr")) ? readFileSync(join(dir, "api.stderr"), "utf8").slice(-4000) : "";
    throw new Error(`${error.message}; stderr:\n${stderr}`);
  }
  api.port = Number(new URL(api.url).port);
  api.stop = stop;
  api.createKey = (options) => createKey(api, options);
  return api;
}

/** A new key made by `api keys create`, once the server knows it. */
async function createKey(api, { tenant = "default", scope, kinds } = {}) {
  const args = ["keys", "create", "--tenant", tenant];
  if (scope) args.push("--scope", scope);
  if (kinds) args.push("--kinds", kinds.join(","));
  const child = startProcess(API_BIN, args, { cwd: api.dir, env: api.env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (data) => (out += data));
  child.stderr.on("data", (data) => (out += data));
  const { code } = await within("api keys create", child.exited, 30_000);
  const m = KEY_LINE.exec(out);
  if (code !== 0 || !m) throw new Error(`keys create failed (${code}): ${out}`);
  const key = m[1];
  const work = scope === "work";
  await waitFor(
    "the api to know the new key",
    async () => {
      const response = work
        ? await fetch(`${api.url}/v1/work/lease`, {
            method: "POST",
            headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
            // A kind never registered: 422 (or 403), never a lease.
            body: JSON.stringify({ worker: "probe", kinds: ["zz-never-registered"], wait_secs: 0 }),
          })
        : await fetch(`${api.url}/v1/jobs?limit=1`, { headers: { authorization: `Bearer ${key}` } });
      await response.arrayBuffer();
      return response.status !== 401;
    },
    { timeoutMs: 10_000 },
  );
  return key;
}

/** A raw call to the api (no SDK): {status, headers, text, json}. */
export async function raw(api, method, path, { key = api.key, body, contentType = "application/json", headers = {} } = {}) {
  const init = { method, headers: { authorization: `Bearer ${key}`, ...headers } };
  if (body !== undefined) {
    init.body = typeof body === "string" || body instanceof Uint8Array ? body : JSON.stringify(body);
    init.headers["content-type"] = contentType;
  }
  const response = await fetch(`${api.url}${path}`, init);
  const bytes = new Uint8Array(await response.arrayBuffer());
  const text = new TextDecoder().decode(bytes);
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, bytes, text, json };
}

// --- a worker in a child process -----------------------------------------------

/** Runs `node script` with `env` added; its output goes to `logPath`. */
export function startNode(script, env, logPath, args = []) {
  const log = createWriteStream(logPath);
  const child = startProcess(process.execPath, [script, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.output = "";
  for (const stream of [child.stdout, child.stderr]) {
    stream.on("data", (data) => {
      child.output += data;
      log.write(data);
    });
  }
  child.exited.then(() => log.end());
  return child;
}

// --- a webhook receiver --------------------------------------------------------

/** Receives webhook deliveries: {url, deliveries: [{webhookId, body}], ofType(type), close()}. */
export async function startWebhookReceiver(t) {
  const deliveries = [];
  const server = createServer((request, response) => {
    let data = "";
    request.on("data", (chunk) => (data += chunk));
    request.on("end", () => {
      try {
        deliveries.push({ webhookId: request.headers["webhook-id"], body: JSON.parse(data || "{}") });
      } finally {
        response.writeHead(200, { "content-length": "0" });
        response.end();
      }
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const close = () =>
    new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  defer(t, close);
  return {
    url: `http://127.0.0.1:${server.address().port}/hook`,
    deliveries,
    ofType: (type) => deliveries.filter((d) => d.body.type === type),
    close,
  };
}

// --- a proxy that loses answers --------------------------------------------------

/** Reads an HTTP/1.1 byte stream message by message. */
class Reader {
  constructor(socket) {
    this.buffer = Buffer.alloc(0);
    this.ended = false;
    this.waiting = null;
    socket.on("data", (data) => {
      this.buffer = Buffer.concat([this.buffer, data]);
      this.wake();
    });
    socket.on("end", () => {
      this.ended = true;
      this.wake();
    });
    socket.on("close", () => {
      this.ended = true;
      this.wake();
    });
    socket.on("error", () => {
      this.ended = true;
      this.wake();
    });
  }

  wake() {
    const waiting = this.waiting;
    this.waiting = null;
    waiting?.();
  }

  async more() {
    if (this.ended) throw new Error("the connection ended");
    await new Promise((resolve) => (this.waiting = resolve));
  }

  async until(delimiter) {
    for (;;) {
      const at = this.buffer.indexOf(delimiter);
      if (at >= 0) {
        const piece = this.buffer.subarray(0, at + delimiter.length);
        this.buffer = this.buffer.subarray(at + delimiter.length);
        return piece;
      }
      await this.more();
    }
  }

  async exactly(n) {
    while (this.buffer.length < n) await this.more();
    const piece = this.buffer.subarray(0, n);
    this.buffer = this.buffer.subarray(n);
    return piece;
  }

  /** One message: head and body (its chunked coding kept), or null at the end. */
  async message({ response }) {
    let head;
    try {
      head = await this.until("\r\n\r\n");
    } catch {
      return null;
    }
    const text = head.toString("latin1");
    const header = (name) => {
      const m = new RegExp(`\\r\\n${name}:\\s*([^\\r]*)`, "i").exec(text);
      return m ? m[1].trim() : null;
    };
    const parts = [head];
    const noBody = response && /^HTTP\/1\.\d (1\d\d|204|304)/.test(text);
    const length = header("content-length");
    if (!noBody && length !== null) {
      parts.push(await this.exactly(Number(length)));
    } else if (!noBody && (header("transfer-encoding") ?? "").toLowerCase() === "chunked") {
      for (;;) {
        const line = await this.until("\r\n");
        parts.push(line);
        const size = parseInt(line.toString("latin1").split(";")[0].trim(), 16);
        if (size === 0) {
          for (;;) {
            const trailer = await this.until("\r\n");
            parts.push(trailer);
            if (trailer.length === 2) break;
          }
          break;
        }
        parts.push(await this.exactly(size + 2));
      }
    }
    return { head: text, path: text.split(" ", 3)[1], raw: Buffer.concat(parts) };
  }
}

/** The body of an HTTP/1.1 message, its chunked coding undone. */
export function bodyOfMessage(raw) {
  const at = raw.indexOf("\r\n\r\n");
  const head = raw.subarray(0, at).toString("latin1");
  let body = raw.subarray(at + 4);
  if (!/\r\ntransfer-encoding:\s*chunked/i.test(head)) return body;
  const parts = [];
  for (;;) {
    const end = body.indexOf("\r\n");
    const size = parseInt(body.subarray(0, end).toString("latin1").split(";")[0], 16);
    if (size === 0) return Buffer.concat(parts);
    parts.push(body.subarray(end + 2, end + 2 + size));
    body = body.subarray(end + 2 + size + 2);
  }
}

/**
 * A TCP proxy in front of the api that forwards every request and its
 * answer, except that for the first complete of each attempt (a path that
 * contains `/complete`, or a batch of reports, keyed by the tokens it
 * names) it forwards the request, reads the api's answer, and closes the
 * client's connection without sending it. `dropped` and `answered` list
 * those requests and answers ({path, key, request, answer}).
 */
export async function startLosingProxy(t, upstreamPort) {
  const seen = new Set();
  const dropped = [];
  const answered = [];
  const sockets = new Set();
  const server = createTcpServer((client) => {
    const upstream = connect(upstreamPort, "127.0.0.1");
    sockets.add(client);
    sockets.add(upstream);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("close", end);
    upstream.on("close", end);
    client.on("error", end);
    upstream.on("error", end);
    const fromClient = new Reader(client);
    const fromApi = new Reader(upstream);
    (async () => {
      for (;;) {
        const request = await fromClient.message({ response: false });
        if (!request) return end();
        upstream.write(request.raw);
        const answer = await fromApi.message({ response: true });
        if (!answer) return end();
        const batch = request.path === "/v1/work/reports";
        if (request.path.includes("/complete") || batch) {
          const key = batch
            ? JSON.parse(bodyOfMessage(request.raw).toString("utf8"))
                .reports.map((r) => r.token)
                .join(",")
            : request.path;
          const record = { path: request.path, key, request: request.raw, answer: answer.raw };
          if (!seen.has(key)) {
            seen.add(key);
            dropped.push(record);
            return end(); // the answer is lost
          }
          answered.push(record);
        }
        client.write(answer.raw);
      }
    })().catch(end);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const close = () =>
    new Promise((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    });
  defer(t, close);
  return { url: `http://127.0.0.1:${server.address().port}`, dropped, answered, close };
}

// --- the README ------------------------------------------------------------------

/** The code block of README.md marked `<!-- example: name -->`. */
export function readmeExample(name) {
  const text = readFileSync(join(PACKAGE_DIR, "README.md"), "utf8");
  const marker = `<!-- example: ${name} -->`;
  const at = text.indexOf(marker);
  if (at < 0) throw new Error(`README.md has no example ${name}`);
  const block = /```ts\n([\s\S]*?)```/.exec(text.slice(at + marker.length));
  if (!block) throw new Error(`README.md's example ${name} has no ts code block`);
  return block[1];
}
