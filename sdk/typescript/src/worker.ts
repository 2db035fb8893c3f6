/**
 * The worker: leases attempts of its kinds, runs each one's handler,
 * heartbeats it while it runs, and reports how it ended.
 */

import { hostname } from "node:os";

import { Attempt, AttemptControl, type LeasedAttempt } from "./attempt.js";
import { ApiError, Cancelled, ConnectionFailed, Permanent, Retryable, describe } from "./errors.js";
import { Answer, type RequestBody, type RetryPolicy, Sender, backoffMs, retryPolicy, sleep } from "./http.js";
import { Log, type LogLevel, type Logger } from "./log.js";
import { InvalidResult, SourceFailed, StreamBody, type StreamResult, type StreamSource, bodyOf, closeBody, stream } from "./results.js";
import { Reporter, batchItem } from "./reports.js";
import { type OpenTelemetryApi, inAttemptSpan, loadOpenTelemetry } from "./tracing.js";

/** Attempts one lease may take. */
export const MOST_LEASED = 100;
/** Kinds one lease may name. */
export const MOST_KINDS = 32;
/** The lease's long poll, in seconds. */
export const LEASE_WAIT_SECS = 30;
const MOST_MESSAGE_CHARS = 4096;
const LEASE_TIMEOUT_MS = (LEASE_WAIT_SECS + 15) * 1000;

const KIND_NAME = /^[a-z][a-z0-9._-]{0,63}$/;
const WORKER_NAME = /^[A-Za-z0-9._:@-]{1,64}$/;

/** A handler: takes the attempt, returns its result (JSON, or `worker.stream(...)`). */
export type Handler<P = Record<string, unknown>> = (attempt: Attempt<P>) => unknown;

export interface WorkerOptions {
  /** Receipt's address, such as `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** A key with the `work` scope (`api keys create --tenant T --scope work`). */
  key: string;
  /** Shown on the jobs it holds: 1 to 64 letters, digits, `.`, `_`, `-`, `:`, `@`. Default `<host>-<pid>`. */
  name?: string | undefined;
  /**
   * How many handlers run at once (default 4). A slot is free again once
   * its handler returns, while its report is on its way; at most twice as
   * many attempts are held.
   */
  concurrency?: number | undefined;
  /** How long `stop()` (or SIGTERM, SIGINT) waits for running handlers, in ms (default 30 000). */
  shutdownGraceMs?: number | undefined;
  /** A fixed heartbeat interval in ms; by default a third of what is left of the lease. */
  heartbeatEveryMs?: number | undefined;
  /** How calls are tried again (default: first backoff 100 ms, at most 5 s, for 120 s). */
  retry?: Partial<RetryPolicy> | undefined;
  /** Stop on SIGTERM and SIGINT while `run()` runs (default true); a second signal ends the grace. */
  handleSignals?: boolean | undefined;
  /** Where log lines go (default `console`). */
  logger?: Logger | undefined;
  /** The least level logged (default `info`). */
  logLevel?: LogLevel | undefined;
  /**
   * OpenTelemetry's API: by default `@opentelemetry/api` when it can be
   * imported; `false` never traces.
   */
  openTelemetry?: OpenTelemetryApi | false | undefined;
}

type Outcome =
  | { what: "complete"; body: RequestBody }
  | { what: "fail"; failure: Failure }
  | { what: "cancelled" };

/** A `fail` report's body. */
export interface Failure {
  retryable: boolean;
  error_type: string;
  message: string;
}

/** A fit `error_type`: 1 to 64 letters, digits, `.`, `_` or `-`. */
export function errorTypeOf(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]/g, "_").slice(0, 64) || "error";
}

function messageOf(text: string): string {
  return text.length <= MOST_MESSAGE_CHARS ? text : `${text.slice(0, MOST_MESSAGE_CHARS - 1)}…`;
}

/**
 * How an error thrown by a handler (or by its result's stream) is
 * reported: `Retryable` and `Permanent` as they say; a result that cannot
 * be sent, permanently; anything else retryable, with the error's `name`
 * as `error_type`.
 */
export function failureOf(error: unknown): Failure {
  if (error instanceof SourceFailed) error = error.error;
  if (error instanceof Retryable || error instanceof Permanent) {
    return { retryable: error.retryable, error_type: errorTypeOf(error.errorType), message: messageOf(error.message) };
  }
  if (error instanceof InvalidResult) {
    return { retryable: false, error_type: "invalid_result", message: messageOf(error.message) };
  }
  if (error instanceof Error) {
    return { retryable: true, error_type: errorTypeOf(error.name || "Error"), message: messageOf(error.message || String(error)) };
  }
  return { retryable: true, error_type: "error", message: messageOf(`the handler threw ${safeString(error)}`) };
}

function safeString(value: unknown): string {
  try {
    return typeof value === "string" ? JSON.stringify(value) : String(value);
  } catch {
    return typeof value;
  }
}

function defaultName(): string {
  const host = hostname().replace(/[^A-Za-z0-9._-]/g, "-").slice(0, 40) || "worker";
  return `${host}-${process.pid}`;
}

/** Wakes whoever waits for a change (a slot freed, a stop). */
class Changes {
  private waiters: Array<() => void> = [];

  wait(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }
}

/** One leased attempt while the worker holds it. */
class Run {
  readonly control: AttemptControl;
  /** Ends the heartbeats (and a heartbeat under way). */
  readonly beats = new AbortController();
  /** Ends the reports (and their retries): given up at shutdown. */
  readonly giveUp = new AbortController();
  nextBeatAt = 0;
  leaseUntil: number;
  readonly timeoutAt: number;
  timeoutReport: Promise<void> | undefined;
  deadlineTimer: NodeJS.Timeout | undefined;
  done: Promise<void> = Promise.resolve();
  /** Whether its handler still takes a slot (it has not returned). */
  handling = true;

  constructor(
    readonly attempt: Attempt<unknown>,
    localTime: (when: Date) => number,
  ) {
    this.control = Attempt.control(attempt);
    this.leaseUntil = localTime(attempt.leaseExpiresAt);
    const deadline = localTime(attempt.deadline);
    const span = Math.max(0, deadline - Date.now());
    // Stop a little before the deadline, so that the timeout's report
    // arrives while the attempt is still held.
    this.timeoutAt = deadline - Math.min(1000, 0.05 * span);
  }

  get label(): string {
    return `job ${this.attempt.jobId} attempt ${this.attempt.attempt}`;
  }
}

/**
 * Runs the attempts of its kinds:
 *
 * ```ts
 * const worker = new Worker({ baseUrl, key, name: "reports-1", concurrency: 4 });
 * worker.kind("sales-export", async (attempt) => ({ rows: 3 }));
 * await worker.run(); // until stop(), SIGTERM or SIGINT
 * ```
 *
 * It leases with a long poll (`wait_secs` 30) at most as many attempts as
 * it has free slots, heartbeats each one at least three times per lease,
 * and reports it: `complete` with the handler's result, `fail` for an
 * error (retryable unless `Permanent`), `cancelled` once a cancel request
 * stopped the handler, a retryable `timeout` at the deadline, and nothing
 * when the lease was lost. Every call is tried again on network errors,
 * 429 and 5xx, with the same body; a 409 on a report is final.
 */
export class Worker {
  readonly name: string;
  private readonly baseUrl: string;
  private readonly key: string;
  private readonly concurrency: number;
  private readonly shutdownGraceMs: number;
  private readonly heartbeatEveryMs: number | undefined;
  private readonly policy: RetryPolicy;
  private readonly handleSignals: boolean;
  private readonly log: Log;
  private readonly openTelemetryOption: OpenTelemetryApi | false | undefined;
  private readonly handlers = new Map<string, Handler<never>>();

  private sender: Sender | undefined;
  private reporter: Reporter | undefined;
  private otel: OpenTelemetryApi | null = null;
  /** Every attempt held, until it is reported (or given up on). */
  private readonly active = new Map<string, Run>();
  private readonly changes = new Changes();
  private stopping: AbortController | undefined;
  private forced = false;
  private stopEarly = false;
  private running: Promise<void> | undefined;

  constructor(options: WorkerOptions) {
    if (!options || typeof options.baseUrl !== "string" || !/^https?:\/\//.test(options.baseUrl)) {
      throw new TypeError("baseUrl is Receipt's http:// or https:// address");
    }
    if (typeof options.key !== "string" || options.key.length === 0) throw new TypeError("key is a work key of Receipt's");
    const name = options.name ?? defaultName();
    if (!WORKER_NAME.test(name)) {
      throw new TypeError(`a worker's name is 1 to 64 letters, digits, '.', '_', '-', ':' or '@', not ${JSON.stringify(name)}`);
    }
    const concurrency = options.concurrency ?? 4;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new TypeError("concurrency is a whole number, at least 1");
    const grace = options.shutdownGraceMs ?? 30_000;
    if (!(grace >= 0)) throw new TypeError("shutdownGraceMs is at least 0");
    if (options.heartbeatEveryMs !== undefined && !(options.heartbeatEveryMs > 0)) {
      throw new TypeError("heartbeatEveryMs is more than 0");
    }
    this.name = name;
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.key = options.key;
    this.concurrency = concurrency;
    this.shutdownGraceMs = grace;
    this.heartbeatEveryMs = options.heartbeatEveryMs;
    this.policy = retryPolicy(options.retry);
    this.handleSignals = options.handleSignals ?? true;
    this.log = new Log(options.logger, options.logLevel);
    this.openTelemetryOption = options.openTelemetry;
  }

  /**
   * `handler(attempt)` runs the attempts of kind `name` (a kind registered
   * with `PUT /v1/kinds/{name}`). Its result is reported with `complete`:
   * any JSON value, or `worker.stream(mediaType, body)`.
   */
  kind<P = Record<string, unknown>>(name: string, handler: Handler<P>): this {
    if (!KIND_NAME.test(name)) {
      throw new TypeError(
        `a kind's name is 1 to 64 lowercase letters, digits, '-', '_' or '.', starting with a letter, not ${JSON.stringify(name)}`,
      );
    }
    if (typeof handler !== "function") throw new TypeError("a handler is a function of the attempt");
    if (this.handlers.has(name)) throw new Error(`kind ${name} already has a handler`);
    if (this.handlers.size >= MOST_KINDS) throw new Error(`a worker runs at most ${MOST_KINDS} kinds`);
    this.handlers.set(name, handler as Handler<never>);
    return this;
  }

  /** A result in a media type the kind declares, sent whole or streamed as it is produced; see `stream()`. */
  stream(mediaType: string, body: StreamSource): StreamResult {
    return stream(mediaType, body);
  }

  /** The kinds this worker runs. */
  get kinds(): string[] {
    return [...this.handlers.keys()];
  }

  /** How many attempts it holds now. */
  get holding(): number {
    return this.active.size;
  }

  /** True once `stop()` (or a signal) began the shutdown. */
  get isStopping(): boolean {
    return this.stopping?.signal.aborted ?? this.stopEarly;
  }

  /**
   * Leases and runs attempts until `stop()` (or SIGTERM, SIGINT): then it
   * stops leasing, waits up to the shutdown grace for the handlers that
   * run, reports how each ended, and resolves. An attempt whose handler
   * has not ended by then is not reported at all: its lease lapses and
   * the job runs again.
   */
  run(): Promise<void> {
    if (this.running) return Promise.reject(new Error("this worker is running already"));
    if (this.handlers.size === 0) return Promise.reject(new Error("no kinds to run: add a handler with worker.kind(name, handler)"));
    const running = this.runInner().finally(() => {
      this.running = undefined;
    });
    this.running = running;
    return running;
  }

  /**
   * Begins the shutdown: leasing stops at once (the long poll is cut off),
   * running handlers get the grace. Resolves when `run()` has.
   */
  stop(): Promise<void> {
    if (!this.running || !this.stopping) {
      this.stopEarly = true;
      return this.running ?? Promise.resolve();
    }
    if (!this.stopping.signal.aborted) {
      this.log.info(`worker ${this.name}: stopping`);
      this.stopping.abort(new Cancelled("shutdown"));
    }
    this.changes.notify();
    return this.running;
  }

  private async runInner(): Promise<void> {
    this.stopping = new AbortController();
    this.forced = false;
    if (this.stopEarly) {
      this.stopEarly = false;
      this.stopping.abort(new Cancelled("shutdown"));
    }
    this.sender = new Sender(this.baseUrl, this.key, this.policy, this.log);
    this.reporter = new Reporter(this.sender);
    this.otel = await loadOpenTelemetry(this.openTelemetryOption, this.log);
    const onSignal = (signal: NodeJS.Signals): void => {
      if (this.stopping?.signal.aborted) {
        this.log.warn(`worker ${this.name}: ${signal} again: not waiting any more`);
        this.forced = true;
        this.changes.notify();
      } else {
        this.log.info(`worker ${this.name}: ${signal}`);
        void this.stop();
      }
    };
    if (this.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      this.log.info(`worker ${this.name}: running kinds ${this.kinds.join(", ")}, ${this.concurrency} at once`);
      await this.leaseLoop();
      await this.drain();
    } finally {
      if (this.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      this.log.info(`worker ${this.name}: stopped`);
    }
  }

  // -- leasing -------------------------------------------------------------

  private async leaseLoop(): Promise<void> {
    const stopping = this.stopping!;
    const kinds = this.kinds;
    let failures = 0;
    while (!stopping.signal.aborted) {
      while (this.free() <= 0 && !stopping.signal.aborted) await this.changes.wait();
      if (stopping.signal.aborted) return;
      const free = this.free();
      let leased: LeasedAttempt[];
      try {
        const answer = await this.sender!.send("POST", "/v1/work/lease", {
          json: { worker: this.name, kinds, max: Math.max(1, Math.min(MOST_LEASED, free)), wait_secs: LEASE_WAIT_SECS },
          timeoutMs: LEASE_TIMEOUT_MS,
          deadlineMs: 0,
          signal: stopping.signal,
        });
        if (answer.status !== 200) throw answer.error();
        const body = answer.json<{ attempts?: LeasedAttempt[] }>();
        leased = Array.isArray(body.attempts) ? body.attempts : [];
      } catch (e) {
        if (stopping.signal.aborted) return;
        failures += 1;
        const retryAfter = e instanceof ApiError ? e.retryAfterMs : undefined;
        const pause = backoffMs(this.policy, failures, retryAfter);
        const text = `lease failed (${failures} in a row): ${describe(e)}; again in ${(pause / 1000).toFixed(1)} s`;
        if (failures === 1 || failures === 5 || failures % 30 === 0) this.log.warn(text);
        else this.log.debug(text);
        await sleep(pause, stopping.signal);
        continue;
      }
      failures = 0;
      // Attempts in hand are run even when the stop came meanwhile: they
      // are held now, and the drain gives them the grace.
      for (const item of leased) this.start(item);
    }
  }

  /**
   * How many attempts the next lease may ask for: a slot is free once its
   * handler has returned, while its report is still on its way (so a busy
   * worker leases its next attempts while its last ones are reported), and
   * the attempts held in all stay within twice the slots, so reports that
   * cannot be sent stop the leasing.
   */
  private free(): number {
    let handling = 0;
    for (const run of this.active.values()) if (run.handling) handling += 1;
    return Math.min(this.concurrency - handling, 2 * this.concurrency - this.active.size);
  }

  private start(item: LeasedAttempt): void {
    let attempt: Attempt<unknown>;
    try {
      attempt = new Attempt<unknown>(item);
    } catch (e) {
      this.log.error(`a leased attempt could not be read (${describe(e)}): ${JSON.stringify(item)}`);
      return;
    }
    const run = new Run(attempt, (when) => this.sender!.clock.local(when));
    if (this.stopping?.signal.aborted) run.control.shuttingDown = true;
    this.log.debug(`${run.label}: leased`);
    this.active.set(attempt.token, run);
    run.done = this.runAttempt(run)
      .catch((e: unknown) => this.log.error(`${run.label}: unexpected error: ${describe(e)}`, e))
      .finally(() => {
        this.active.delete(attempt.token);
        this.changes.notify();
      });
  }

  // -- shutdown ------------------------------------------------------------

  private async drain(): Promise<void> {
    for (const run of this.active.values()) run.control.shuttingDown = true;
    if (this.active.size > 0) {
      this.log.info(
        `worker ${this.name}: stopping; waiting up to ${(this.shutdownGraceMs / 1000).toFixed(1)} s for ${this.active.size} running attempt(s)`,
      );
    }
    const until = Date.now() + this.shutdownGraceMs;
    while (this.active.size > 0 && !this.forced) {
      const left = until - Date.now();
      if (left <= 0) break;
      const wake = new AbortController();
      await Promise.race([this.changes.wait(), sleep(left, wake.signal)]);
      wake.abort(); // ends the sleep, and its timer
    }
    const leftOver = [...this.active.values()];
    if (leftOver.length === 0) return;
    for (const run of leftOver) {
      run.control.abandon("shutdown");
      run.beats.abort();
      run.giveUp.abort(new Cancelled("shutdown"));
      if (run.deadlineTimer) clearTimeout(run.deadlineTimer);
      this.active.delete(run.attempt.token);
    }
    this.log.warn(
      `worker ${this.name}: ${leftOver.length} attempt(s) did not finish within the grace and are not reported; ` +
        `their leases lapse and they run again: ${leftOver.map((r) => `${r.attempt.jobId} (attempt ${r.attempt.attempt})`).join(", ")}`,
    );
  }

  // -- one attempt ---------------------------------------------------------

  /**
   * Runs the handler and heartbeats the attempt while the handler (and
   * then its report) runs; acts on the deadline, a cancel request and a
   * lost lease.
   */
  private async runAttempt(run: Run): Promise<void> {
    const control = run.control;
    // Take the lease up at once: a lease that lapses before any heartbeat
    // came is handed back uncounted, as one never received. The handler
    // runs once Receipt has confirmed that the attempt is this worker's.
    const takeUp = await this.beat(run);
    if (takeUp === "lost" || takeUp === "stopped") return;
    if (takeUp === "failed") {
      this.log.error(`${run.label}: the lease could not be taken up; the attempt is dropped and Receipt hands it back`);
      control.abandon("lost");
      return;
    }
    const beating = this.beatLoop(run);
    const left = run.timeoutAt - Date.now();
    run.deadlineTimer = setTimeout(() => this.onDeadline(run), Math.max(0, left));
    try {
      const outcome: Outcome = takeUp === "cancel" ? { what: "cancelled" } : await this.callHandler(run);
      run.handling = false;
      this.changes.notify();
      if (control.claim("reporting")) {
        await this.report(run, outcome);
      } else {
        this.log.info(
          `${run.label}: the handler ended after the attempt was ${control.stopReason ?? control.state}; its outcome is not reported`,
        );
        if (outcome.what === "complete") await closeBody(outcome.body);
      }
      if (run.timeoutReport) await run.timeoutReport;
    } finally {
      clearTimeout(run.deadlineTimer);
      run.beats.abort();
      await beating;
    }
  }

  private onDeadline(run: Run): void {
    const control = run.control;
    if (!control.claim("timed_out")) return;
    control.mustStop("timeout");
    run.beats.abort();
    this.log.warn(`${run.label}: past its deadline (${run.attempt.deadline.toISOString()}); stopping it, reporting a timeout`);
    run.timeoutReport = this.report(run, {
      what: "fail",
      failure: {
        retryable: true,
        error_type: "timeout",
        message: `attempt ${run.attempt.attempt} ran past its deadline (${run.attempt.deadline.toISOString()})`,
      },
    });
  }

  private async callHandler(run: Run): Promise<Outcome> {
    const attempt = run.attempt;
    const control = run.control;
    try {
      const handler = this.handlers.get(attempt.kind) as Handler<unknown> | undefined;
      if (!handler) {
        throw new Permanent(`this worker has no handler for kind ${attempt.kind}`, { errorType: "unknown_kind" });
      }
      const value = await inAttemptSpan(
        this.otel,
        attempt,
        (traceparent) => {
          control.reportTraceparent = traceparent;
        },
        async () => await handler(attempt),
      );
      return { what: "complete", body: bodyOf(value) };
    } catch (e) {
      if (control.stopReason === "cancel_requested") {
        this.log.info(`${run.label}: stopped after the cancel request (${describe(e)}); reporting it cancelled`);
        return { what: "cancelled" };
      }
      const failure = failureOf(e);
      if (e instanceof Retryable || e instanceof Permanent || e instanceof InvalidResult) {
        this.log.info(`${run.label}: failed (${failure.retryable ? "retryable" : "permanent"}, ${failure.error_type}): ${failure.message}`);
      } else if (control.state === "running") {
        this.log.warn(
          `${run.label}: the handler threw ${describe(e)} (reported as ${failure.retryable ? "retryable" : "permanent"})`,
          e,
        );
      }
      return { what: "fail", failure };
    }
  }

  // -- heartbeats ----------------------------------------------------------

  private scheduleBeat(run: Run): void {
    const now = Date.now();
    if (this.heartbeatEveryMs !== undefined) {
      run.nextBeatAt = now + this.heartbeatEveryMs;
      return;
    }
    // At least three heartbeats per lease: a third of what is left of it,
    // between 50 ms and 30 s.
    const left = run.leaseUntil - now;
    run.nextBeatAt = now + Math.min(30_000, Math.max(50, left / 3));
  }

  private async beatLoop(run: Run): Promise<void> {
    const beats = run.beats.signal;
    while (!beats.aborted) {
      if (!(await sleep(run.nextBeatAt - Date.now(), beats))) return;
      await this.beat(run);
    }
  }

  /**
   * One heartbeat (tried until the lease lapses), with the progress; acts
   * on its answer: `ok`, `cancel` (a cancel was requested: the handler's
   * signal aborts), `lost` (409 or 404: the handler's signal aborts, the
   * heartbeats stop, nothing is reported), `failed` (no answer in time, or
   * another refusal) or `stopped` (the heartbeats were ended meanwhile).
   */
  private async beat(run: Run): Promise<"ok" | "cancel" | "lost" | "failed" | "stopped"> {
    const control = run.control;
    const path = `/v1/work/attempts/${encodeURIComponent(run.attempt.token)}/heartbeat`;
    const leaseLeft = Math.max(1000, run.leaseUntil - Date.now());
    let answer: Answer;
    try {
      answer = await this.sender!.send("POST", path, {
        json: control.progress === null ? {} : { progress: control.progress },
        headers: this.traceHeaders(run),
        deadlineMs: leaseLeft,
        timeoutMs: Math.min(30_000, leaseLeft),
        signal: run.beats.signal,
      });
    } catch (e) {
      if (run.beats.signal.aborted) return "stopped";
      this.log.warn(`${run.label}: heartbeat failed: ${describe(e)}`);
      this.scheduleBeat(run);
      return "failed";
    }
    if (answer.ok) {
      let body: { cancel_requested?: boolean; lease_expires_at?: string };
      try {
        body = answer.json();
      } catch {
        body = {};
      }
      if (typeof body.lease_expires_at === "string") {
        const until = this.sender!.clock.local(body.lease_expires_at);
        if (!Number.isNaN(until)) {
          run.leaseUntil = until;
          control.leaseExpiresAt = new Date(body.lease_expires_at);
        }
      }
      this.scheduleBeat(run);
      if (body.cancel_requested) {
        if (control.stopReason === null) {
          this.log.info(`${run.label}: cancel requested; stopping the handler`);
          control.mustStop("cancel_requested");
        }
        return "cancel";
      }
      return "ok";
    }
    const problem = answer.problem();
    if (answer.status === 404 || answer.status === 409) {
      // The attempt is no longer held: stop the handler, report nothing.
      run.beats.abort();
      if (control.abandon("lost")) {
        this.log.warn(
          `${run.label}: the heartbeat says the attempt is no longer held (${problem.type}: ${problem.detail}); stopping its handler, reporting nothing`,
        );
      }
      return "lost";
    }
    this.log.error(`${run.label}: heartbeat refused with ${answer.status} (${problem.type}: ${problem.detail})`);
    this.scheduleBeat(run);
    return "failed";
  }

  // -- reports -------------------------------------------------------------

  private traceHeaders(run: Run): Record<string, string> {
    const traceparent = run.control.reportTraceparent ?? run.attempt.traceparent;
    return traceparent ? { traceparent } : {};
  }

  /**
   * Sends a report with retries; a refusal is logged and dropped; a result
   * refused for its body (413, 415) becomes a permanent failure.
   */
  private async report(run: Run, outcome: Outcome): Promise<void> {
    const path = `/v1/work/attempts/${encodeURIComponent(run.attempt.token)}`;
    const signal = run.giveUp.signal;
    const headers = this.traceHeaders(run);
    try {
      let answer = await this.sendBatched(run, outcome);
      if (outcome.what === "complete") {
        const streamed = outcome.body instanceof StreamBody;
        try {
          answer ??= await this.sender!.send("POST", `${path}/complete`, {
            body: outcome.body,
            headers,
            signal,
            // A big result may take a while to send: up to the deadline.
            timeoutMs: streamed ? Math.max(30_000, run.attempt.deadline.getTime() - Date.now() + 30_000) : 30_000,
          });
        } catch (e) {
          if (e instanceof SourceFailed || e instanceof InvalidResult) {
            if (run.control.stopReason === "cancel_requested") {
              this.log.info(`${run.label}: the result's stream stopped after the cancel request; reporting it cancelled`);
              return await this.report(run, { what: "cancelled" });
            }
            this.log.warn(`${run.label}: the result could not be sent: ${e.message}`);
            return await this.report(run, { what: "fail", failure: failureOf(e) });
          }
          throw e;
        } finally {
          await closeBody(outcome.body);
        }
        if (answer.status === 413 || answer.status === 415) {
          const problem = answer.problem();
          const failure: Failure = {
            retryable: false,
            error_type: "invalid_result",
            message: messageOf(
              answer.status === 413
                ? `the result is too large: ${problem.detail}`
                : `the result's media type ${outcome.body.contentType} is not one the kind declares: ${problem.detail}`,
            ),
          };
          this.log.error(`${run.label}: ${failure.message}`);
          return await this.report(run, { what: "fail", failure });
        }
      } else if (outcome.what === "fail") {
        answer ??= await this.sender!.send("POST", `${path}/fail`, { json: outcome.failure, headers, signal });
      } else {
        answer ??= await this.sender!.send("POST", `${path}/cancelled`, { headers, signal });
      }
      this.readReport(run, outcome.what, answer);
    } catch (e) {
      if (signal.aborted) return; // given up at shutdown: the lease lapses
      if (e instanceof ApiError || e instanceof ConnectionFailed) {
        this.log.error(`${run.label}: could not report ${outcome.what}: ${describe(e)}; the lease lapses and the job runs again`);
        return;
      }
      throw e;
    }
  }

  /**
   * The report in the next batch of reports: its own answer, or
   * `undefined` when it goes alone (a streamed or big result, or a batch
   * refused as a whole). Given up on at shutdown, as a report alone is.
   */
  private async sendBatched(run: Run, outcome: Outcome): Promise<Answer | undefined> {
    const traceparent = run.control.reportTraceparent ?? run.attempt.traceparent;
    const item = batchItem(run.attempt.token, traceparent, outcome);
    if (item === undefined) return undefined;
    const signal = run.giveUp.signal;
    signal.throwIfAborted();
    let stop: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      stop = () => reject(signal.reason);
      signal.addEventListener("abort", stop, { once: true });
    });
    try {
      return await Promise.race([this.reporter!.report(run.attempt.token, item), aborted]);
    } finally {
      signal.removeEventListener("abort", stop!);
    }
  }

  private readReport(run: Run, what: string, answer: Answer): void {
    if (answer.ok) {
      this.log.debug(`${run.label}: ${what} reported`);
      return;
    }
    const problem = answer.problem();
    const text = `${run.label}: ${what} refused with ${answer.status} (${problem.type}: ${problem.detail}); dropped`;
    if (answer.status === 404 || answer.status === 409) this.log.warn(text);
    else this.log.error(text);
  }
}
