/**
 * Errors: the ones a handler throws to say how its attempt ended, and the
 * ones the SDK throws when Receipt refuses a call or cannot be reached.
 */

/** Why an attempt's handler must stop (`attempt.stopReason`, `Cancelled.reason`). */
export type StopReason =
  /** A client cancelled the job: the SDK reports `cancelled` once the handler stops. */
  | "cancel_requested"
  /** The lease was lost (a heartbeat was answered 409 or 404): nothing is reported. */
  | "lost"
  /** The attempt ran into its deadline: the SDK reported a retryable `timeout`. */
  | "timeout"
  /** The worker's shutdown grace ran out: nothing is reported, the lease lapses. */
  | "shutdown";

export interface FailureOptions {
  /**
   * The job's `error.type`: 1 to 64 letters, digits, `.`, `_` or `-`
   * (anything else is replaced by `_`). Default `error`.
   */
  errorType?: string | undefined;
  cause?: unknown | undefined;
}

/**
 * Throw from a handler: the attempt failed, and another attempt may succeed.
 * Receipt queues the job again after a backoff while it has attempts left
 * (the kind's `max_attempts`); the last one ends FAILED.
 */
export class Retryable extends Error {
  readonly retryable: boolean = true;
  readonly errorType: string;

  constructor(message = "", options: FailureOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "Retryable";
    this.errorType = options.errorType ?? "error";
  }
}

/**
 * Throw from a handler: the attempt failed for good, the job ends FAILED
 * without another attempt (parameters that can never work, a report that
 * does not exist...).
 */
export class Permanent extends Error {
  readonly retryable: boolean = false;
  readonly errorType: string;

  constructor(message = "", options: FailureOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "Permanent";
    this.errorType = options.errorType ?? "error";
  }
}

/**
 * The reason of an attempt's aborted `signal` (`attempt.signal.reason`),
 * thrown by `attempt.throwIfStopped()` and `attempt.sleep()`. A handler
 * may let it propagate: after a cancel request the SDK reports `cancelled`.
 */
export class Cancelled extends Error {
  readonly reason: StopReason;

  constructor(reason: StopReason = "cancel_requested") {
    super(`the attempt must stop: ${reason}`);
    this.name = "Cancelled";
    this.reason = reason;
  }
}

/** One entry of a 422's `errors`. */
export interface FieldError {
  field: string;
  message: string;
  [member: string]: unknown;
}

/** An `application/problem+json` document (RFC 9457), as Receipt sends it. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  errors?: FieldError[] | undefined;
  ids?: string[] | undefined;
  [member: string]: unknown;
}

/** Base of the errors the SDK throws about its calls to Receipt. */
export class ReceiptError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ReceiptError";
  }
}

/** Receipt answered with an error status; `problem` is its document. */
export class ApiError extends ReceiptError {
  readonly method: string;
  readonly url: string;
  readonly problem: Problem;
  /** The answer's `Retry-After`, in milliseconds, when it had one. */
  readonly retryAfterMs: number | undefined;

  constructor(method: string, url: string, problem: Problem, retryAfterMs?: number) {
    super(`${method} ${url}: ${problem.status} ${problem.type}: ${problem.detail}`);
    this.name = "ApiError";
    this.method = method;
    this.url = url;
    this.problem = problem;
    this.retryAfterMs = retryAfterMs;
  }

  get status(): number {
    return this.problem.status;
  }

  get type(): string {
    return this.problem.type;
  }

  get detail(): string {
    return this.problem.detail;
  }

  /** A 422's failing fields (`[{field, message}]`), else empty. */
  get errors(): FieldError[] {
    return this.problem.errors ?? [];
  }
}

/**
 * Receipt could not be reached, or its answer was lost, on every try of a
 * call; `cause` is the last try's error.
 */
export class ConnectionFailed extends ReceiptError {
  readonly method: string;
  readonly url: string;

  constructor(method: string, url: string, cause: unknown) {
    super(`${method} ${url}: ${describe(cause)}`, { cause });
    this.name = "ConnectionFailed";
    this.method = method;
    this.url = url;
  }
}

/** An error's name and message, and its cause's (fetch hides the real one there). */
export function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  let text = `${error.name}: ${error.message}`;
  const cause = (error as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    text += ` (${cause.name}${typeof code === "string" ? ` ${code}` : ""}: ${cause.message})`;
  }
  return text;
}
