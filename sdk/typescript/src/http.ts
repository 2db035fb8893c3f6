/**
 * Calls to Receipt with retries: on a network error (a refused or cut
 * connection, a lost answer, a timeout), a 408, a 429 or a 5xx, the same
 * request is sent again, with the same body, after an exponential backoff
 * with equal jitter, never sooner than the answer's `Retry-After`.
 */

import { ApiError, ConnectionFailed, describe, type Problem } from "./errors.js";
import type { Log } from "./log.js";
import { VERSION } from "./version.js";

export const USER_AGENT = `receipt-worker-ts/${VERSION} node/${process.versions.node}`;

/**
 * How calls are tried again. `firstBackoffMs` doubles per try up to
 * `maxBackoffMs`, with equal jitter (half of it fixed, half random), and
 * never less than an answer's `Retry-After`; tries stop `deadlineMs` after
 * the first one, with the last try's error.
 */
export interface RetryPolicy {
  firstBackoffMs: number;
  maxBackoffMs: number;
  deadlineMs: number;
}

export const DEFAULT_RETRY: Readonly<RetryPolicy> = Object.freeze({
  firstBackoffMs: 100,
  maxBackoffMs: 5_000,
  deadlineMs: 120_000,
});

export function retryPolicy(partial?: Partial<RetryPolicy>): RetryPolicy {
  const policy: RetryPolicy = { ...DEFAULT_RETRY };
  for (const name of ["firstBackoffMs", "maxBackoffMs", "deadlineMs"] as const) {
    const value = partial?.[name];
    if (value !== undefined) policy[name] = value;
  }
  for (const [name, value] of Object.entries(policy)) {
    if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
      throw new TypeError(`retry.${name} is a number of milliseconds, at least 0`);
    }
  }
  return policy;
}

/** The pause after try number `tries` (1 for the first), in milliseconds. */
export function backoffMs(policy: RetryPolicy, tries: number, retryAfterMs?: number): number {
  const ceiling = Math.min(policy.maxBackoffMs, policy.firstBackoffMs * 2 ** Math.max(0, tries - 1));
  let pause = ceiling / 2 + Math.random() * (ceiling / 2);
  if (retryAfterMs !== undefined) pause = Math.max(pause, retryAfterMs);
  return pause;
}

/** `Retry-After` in milliseconds: a whole number of seconds, or an HTTP date. */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (!value) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const when = Date.parse(text);
  if (Number.isNaN(when)) return undefined;
  return Math.max(0, when - now);
}

export function isRetryableStatus(status: number, headers: Headers, retry409: boolean): boolean {
  if (status === 408 || status === 429 || status >= 500) return true;
  // An Idempotency-Key whose first request still runs: 409 with Retry-After
  // (a 409 about a resource's state has none).
  return retry409 && status === 409 && headers.has("retry-after");
}

/**
 * Maps Receipt's times (`lease_expires_at`, `deadline`) to this machine's
 * clock: when the answers' `Date` says this clock is off by more than two
 * seconds, the offset is taken into account.
 */
export class ServerClock {
  /** Server time minus local time, in milliseconds. */
  offsetMs = 0;

  observe(headers: Headers): void {
    const date = headers.get("date");
    if (!date) return;
    const server = Date.parse(date);
    if (Number.isNaN(server)) return;
    const now = Date.now();
    // Date has whole seconds, and a server may write it from a clock read
    // up to a second earlier: its time is within [Date, Date + 2 s). Only
    // a local clock outside that (with some room) counts as off.
    this.offsetMs = now >= server - 500 && now <= server + 2_500 ? 0 : server + 1_000 - now;
  }

  /** A time of the server's (RFC 3339) as a local `Date.now()` value. */
  local(when: string | Date): number {
    const ms = typeof when === "string" ? Date.parse(when) : when.getTime();
    return ms - this.offsetMs;
  }
}

/** A request body that can be sent again, the same, on each try. */
export interface RequestBody {
  readonly contentType: string;
  forTry(tries: number): Uint8Array | AsyncIterable<Uint8Array>;
  /** An error of the body's own source (not of the connection): ends the call at once. */
  failure?(): Error | undefined;
}

export class BytesBody implements RequestBody {
  constructor(
    readonly data: Uint8Array,
    readonly contentType: string = "application/json",
  ) {}

  static json(value: unknown): BytesBody {
    return new BytesBody(new TextEncoder().encode(JSON.stringify(value)), "application/json");
  }

  forTry(): Uint8Array {
    return this.data;
  }
}

/** An answer, its body read whole. */
export class Answer {
  constructor(
    readonly method: string,
    readonly url: string,
    readonly status: number,
    readonly headers: Headers,
    readonly body: Uint8Array,
  ) {}

  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  text(): string {
    return new TextDecoder().decode(this.body);
  }

  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }

  problem(): Problem {
    let body: unknown;
    try {
      body = this.json();
    } catch {
      body = undefined;
    }
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      return { type: "/problems/http-error", title: "", status: this.status, detail: this.text().slice(0, 500) };
    }
    const doc = body as Record<string, unknown>;
    return {
      ...doc,
      type: typeof doc["type"] === "string" ? doc["type"] : "/problems/http-error",
      title: typeof doc["title"] === "string" ? doc["title"] : "",
      status: typeof doc["status"] === "number" ? doc["status"] : this.status,
      detail: typeof doc["detail"] === "string" ? doc["detail"] : "",
    };
  }

  error(): ApiError {
    return new ApiError(this.method, this.url, this.problem(), parseRetryAfter(this.headers.get("retry-after")));
  }
}

/**
 * Waits `ms`; true when it did, false as soon as `signal` aborts (it never
 * rejects).
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (slept: boolean): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(slept);
    };
    const onAbort = (): void => done(false);
    const timer = setTimeout(() => done(true), Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export interface SendOptions {
  /** A body sent as JSON (`application/json`), the same bytes on every try. */
  json?: unknown | undefined;
  body?: RequestBody | undefined;
  headers?: Record<string, string> | undefined;
  query?: Record<string, string | number | undefined> | undefined;
  /** How long one try may take, in milliseconds. */
  timeoutMs?: number | undefined;
  /** How long tries may go on, from the first; 0 for one try. Default: the policy's. */
  deadlineMs?: number | undefined;
  /** Retry a 409 that has `Retry-After` (an Idempotency-Key still in progress). */
  retry409?: boolean | undefined;
  /** Aborts the call (its try and its pauses): it rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
}

const DEFAULT_TIMEOUT_MS = 30_000;

/**
 * A request `fetch` refused to send (a header value it does not take...):
 * another try would fail the same. Its network errors are `fetch failed`
 * or `terminated`, with their cause.
 */
function isMistake(error: unknown): boolean {
  return (
    error instanceof TypeError &&
    (error as { cause?: unknown }).cause === undefined &&
    error.message !== "fetch failed" &&
    error.message !== "terminated"
  );
}

class TryTimedOut extends Error {
  constructor(ms: number) {
    super(`no answer within ${ms} ms`);
    this.name = "TimeoutError";
  }
}

/** Sends calls with retries, through Node's own `fetch` (its pooled keep-alive connections). */
export class Sender {
  readonly clock = new ServerClock();

  constructor(
    readonly baseUrl: string,
    private readonly key: string,
    readonly policy: RetryPolicy,
    private readonly log: Log,
  ) {}

  url(path: string, query?: Record<string, string | number | undefined>): string {
    let url = this.baseUrl + path;
    if (query) {
      const params = new URLSearchParams();
      for (const [name, value] of Object.entries(query)) {
        if (value !== undefined) params.set(name, String(value));
      }
      const text = params.toString();
      if (text) url += `?${text}`;
    }
    return url;
  }

  /**
   * The first answer not worth another try (2xx, 3xx, 4xx but 408 and 429);
   * throws `ApiError` or `ConnectionFailed` when the deadline passes first,
   * a body's own failure at once, and the signal's reason when it aborts.
   */
  async send(method: string, path: string, options: SendOptions = {}): Promise<Answer> {
    const body: RequestBody | undefined =
      options.body ?? (options.json !== undefined ? BytesBody.json(options.json) : undefined);
    const url = this.url(path, options.query);
    const limit = Date.now() + (options.deadlineMs ?? this.policy.deadlineMs);
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.key}`,
      "user-agent": USER_AGENT,
      ...(options.headers ?? {}),
    };
    if (body) headers["content-type"] = body.contentType;
    const signal = options.signal;
    let tries = 0;
    for (;;) {
      tries += 1;
      let error: Error;
      let retryAfterMs: number | undefined;
      try {
        const answer = await this.once(method, url, headers, body, tries, options.timeoutMs ?? DEFAULT_TIMEOUT_MS, signal);
        this.clock.observe(answer.headers);
        if (!isRetryableStatus(answer.status, answer.headers, options.retry409 ?? false)) return answer;
        error = answer.error();
        retryAfterMs = parseRetryAfter(answer.headers.get("retry-after"));
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        const own = body?.failure?.();
        if (own) throw own;
        if (isMistake(e)) throw e;
        error = new ConnectionFailed(method, path, e);
      }
      const wait = backoffMs(this.policy, tries, retryAfterMs);
      if (Date.now() + wait > limit) throw error;
      this.log.debug(`${method} ${path}: try ${tries} failed (${describe(error)}); again in ${Math.round(wait)} ms`);
      if (!(await sleep(wait, signal))) throw signal?.reason;
    }
  }

  private async once(
    method: string,
    url: string,
    headers: Record<string, string>,
    body: RequestBody | undefined,
    tries: number,
    timeoutMs: number,
    outer: AbortSignal | undefined,
  ): Promise<Answer> {
    // One controller per try, fed by the caller's signal and a timer (no
    // AbortSignal.any: its listeners pile up on a long-lived signal).
    const controller = new AbortController();
    const onAbort = (): void => controller.abort(outer?.reason);
    if (outer?.aborted) throw outer.reason;
    outer?.addEventListener("abort", onAbort, { once: true });
    const timer = setTimeout(() => controller.abort(new TryTimedOut(timeoutMs)), timeoutMs);
    try {
      const init: RequestInit & { duplex?: "half" } = { method, headers, signal: controller.signal };
      if (body) {
        const data = body.forTry(tries);
        init.body = data;
        if (!(data instanceof Uint8Array)) init.duplex = "half";
      }
      const response = await fetch(url, init);
      const bytes = new Uint8Array(await response.arrayBuffer());
      return new Answer(method, url, response.status, response.headers, bytes);
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    }
  }
}
