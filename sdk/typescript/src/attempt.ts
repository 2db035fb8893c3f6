/** An attempt a worker leased, as its handler sees it. */

import { Cancelled, type StopReason } from "./errors.js";

export type Priority = "high" | "normal" | "low";

/** An attempt as `POST /v1/work/lease` answers it. */
export interface LeasedAttempt {
  token: string;
  job_id: string;
  kind: string;
  attempt: number;
  max_attempts: number;
  params: unknown;
  priority: Priority;
  lease_expires_at: string;
  deadline: string;
  traceparent?: string | null | undefined;
}

/** Who reports the attempt's end: one of them, once. */
export type AttemptState =
  /** the handler runs; nobody has reported */
  | "running"
  /** the handler ended; its outcome is being reported */
  | "reporting"
  /** the deadline came first; the SDK reports the timeout */
  | "timed_out"
  /** lost, or left at shutdown: nothing is reported */
  | "abandoned";

/** The SDK's side of an attempt. */
export class AttemptControl {
  readonly controller = new AbortController();
  state: AttemptState = "running";
  stopReason: StopReason | null = null;
  progress: number | null = null;
  shuttingDown = false;
  leaseExpiresAt: Date;
  /** The traceparent of the attempt's span, sent with its reports. */
  reportTraceparent: string | null = null;

  constructor(leaseExpiresAt: Date) {
    this.leaseExpiresAt = leaseExpiresAt;
  }

  /** Aborts the handler's signal. A cancel request gives way to the reasons that end the attempt for the SDK. */
  mustStop(reason: StopReason): void {
    if (this.stopReason === null || this.stopReason === "cancel_requested") this.stopReason = reason;
    if (!this.controller.signal.aborted) this.controller.abort(new Cancelled(reason));
  }

  /** Moves from running to `state`; false when another already did. */
  claim(state: Exclude<AttemptState, "running">): boolean {
    if (this.state !== "running") return false;
    this.state = state;
    return true;
  }

  /** Nothing is to be reported (lost, shutdown): stops the handler. False when its outcome is being reported already. */
  abandon(reason: "lost" | "shutdown"): boolean {
    const claimed = this.claim("abandoned");
    this.mustStop(reason);
    return claimed;
  }
}

/**
 * One attempt of a job, leased by a worker. The handler reads `params`
 * (the job's parameters, checked against the kind's schema), `jobId`,
 * `kind`, `attempt` (1 for the first), `maxAttempts`, `priority`,
 * `deadline` and `traceparent`, reports its progress with `progress()`,
 * and stops when `signal` aborts: a client's cancel (seen by the next
 * heartbeat), a lost lease, the deadline, or the end of the worker's
 * shutdown grace.
 */
export class Attempt<P = Record<string, unknown>> {
  /** Names the attempt in its reports; opaque. */
  readonly token: string;
  readonly jobId: string;
  readonly kind: string;
  /** 1 for the first attempt. */
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly params: P;
  readonly priority: Priority;
  /** When the attempt must have ended (the kind's `timeout_secs` from the lease). */
  readonly deadline: Date;
  /** The trace context of the submit that made the job, when it was traced. */
  readonly traceparent: string | null;
  /**
   * Aborted when the handler must stop; its `reason` is a `Cancelled`
   * whose `reason` says why. Pass it on (`fetch(url, { signal })`, streams,
   * child processes) so that the work stops with it.
   */
  readonly signal: AbortSignal;
  readonly #control: AttemptControl;

  constructor(leased: LeasedAttempt, control?: AttemptControl) {
    this.token = String(leased.token);
    this.jobId = String(leased.job_id);
    this.kind = String(leased.kind);
    this.attempt = Number(leased.attempt);
    this.maxAttempts = Number(leased.max_attempts);
    this.params = leased.params as P;
    this.priority = leased.priority ?? "normal";
    this.deadline = parseTime(leased.deadline, "deadline");
    this.traceparent = leased.traceparent || null;
    this.#control = control ?? new AttemptControl(parseTime(leased.lease_expires_at, "lease_expires_at"));
    this.signal = this.#control.controller.signal;
  }

  /** When the lease lapses unless a heartbeat extends it (the SDK's heartbeats do). */
  get leaseExpiresAt(): Date {
    return this.#control.leaseExpiresAt;
  }

  /** True once the handler should stop (`signal.aborted`). */
  get stopped(): boolean {
    return this.signal.aborted;
  }

  /** Why the handler must stop, or null while it need not. */
  get stopReason(): StopReason | null {
    return this.#control.stopReason;
  }

  /**
   * True once the worker is stopping (SIGTERM, SIGINT, `stop()`): it waits
   * for this handler up to its shutdown grace, so a long handler may choose
   * to end early with `Retryable`.
   */
  get shuttingDown(): boolean {
    return this.#control.shuttingDown;
  }

  /** How far the attempt is, 0 to 1: sent with the next heartbeat, shown as the job's `progress`. */
  progress(fraction: number): void {
    if (typeof fraction !== "number" || Number.isNaN(fraction) || fraction < 0 || fraction > 1) {
      throw new RangeError(`progress is from 0 to 1, not ${String(fraction)}`);
    }
    this.#control.progress = fraction;
  }

  /** Throws the signal's reason (a `Cancelled`) once the handler must stop. */
  throwIfStopped(): void {
    this.signal.throwIfAborted();
  }

  /** Waits `ms`, but rejects with the signal's reason (a `Cancelled`) as soon as the handler must stop. */
  sleep(ms: number): Promise<void> {
    const signal = this.signal;
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(signal.reason);
      };
      const timer = setTimeout(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      }, Math.max(0, ms));
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** @internal The SDK's side of the attempt (not for handlers). */
  static control(attempt: Attempt<unknown>): AttemptControl {
    return attempt.#control;
  }
}

function parseTime(value: unknown, what: string): Date {
  const when = new Date(String(value));
  if (Number.isNaN(when.getTime())) throw new TypeError(`the lease's ${what} is not a time: ${String(value)}`);
  return when;
}

