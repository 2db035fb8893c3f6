/**
 * A small client for the calls around a worker, with a key of full rights:
 * register a kind, submit jobs, read, wait for and cancel them. Every call
 * is tried again as the worker's are (network errors, 429, 5xx, honouring
 * `Retry-After`), and a `POST` sends one `Idempotency-Key` on all its tries,
 * so a retry never makes a second job.
 */

import { randomUUID } from "node:crypto";

import type { Priority } from "./attempt.js";
import { type Answer, type RetryPolicy, Sender, retryPolicy } from "./http.js";
import { Log, type LogLevel, type Logger } from "./log.js";

export type JobStatus = "QUEUED" | "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLED";

export const FINAL_STATUSES: ReadonlySet<JobStatus> = new Set<JobStatus>(["SUCCEEDED", "FAILED", "CANCELLED"]);

/** The job object, as `GET /v1/jobs/{job_id}` answers it. */
export interface Job {
  job_id: string;
  kind: string;
  params: unknown;
  status: JobStatus;
  attempts: number;
  progress: number | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  result_url: string | null;
  error: { type: string; message: string } | null;
  cancel_requested: boolean;
  next_attempt_at: string | null;
  retry_of: string | null;
  schedule_id: string | null;
  priority: Priority;
  waiting: { reason: string; until: string | null; running: number | null; limit: number | null } | null;
  [member: string]: unknown;
}

/** A registered kind, as `PUT /v1/kinds/{name}` answers it. */
export interface Kind {
  name: string;
  builtin: boolean;
  about: string;
  params_schema: Record<string, unknown>;
  timeout_secs: number;
  max_attempts: number;
  result_media_types: string[];
  priority: Priority;
  max_running?: number | null | undefined;
  created_at: string;
  updated_at: string;
  [member: string]: unknown;
}

/** A kind's declaration (`PUT /v1/kinds/{name}`). */
export interface KindDeclaration {
  /** A JSON Schema (Draft 2020-12) a submit's body must meet. */
  paramsSchema: Record<string, unknown>;
  /** How long one attempt may run, from its lease, 1 to 86400 s. */
  timeoutSecs: number;
  /** Attempts before a retryable failure becomes final, 1 to 100 (default 5). */
  maxAttempts?: number | undefined;
  /** The media types a result may have (default `["application/json"]`). */
  resultMediaTypes?: string[] | undefined;
  /** How many of the tenant's jobs of the kind may run at once. */
  maxRunning?: number | undefined;
  /** The priority of a submit that names none. */
  priority?: Priority | undefined;
  /** What the kind does, at most 1000 characters. */
  about?: string | undefined;
}

export interface SubmitOptions {
  /** Sent as `Idempotency-Key`: the same key answers the same job (default: a new one, kept over the retries). */
  idempotencyKey?: string | undefined;
  priority?: Priority | undefined;
  /** Seconds from now to start the job. */
  delay?: number | undefined;
  /** When to start the job. */
  runAt?: Date | string | undefined;
}

export interface ClientOptions {
  baseUrl: string;
  /** A key of full rights. */
  key: string;
  retry?: Partial<RetryPolicy> | undefined;
  /** How long one try may take, in ms (default 30 000; a long poll gets its wait on top). */
  timeoutMs?: number | undefined;
  logger?: Logger | undefined;
  logLevel?: LogLevel | undefined;
}

export interface RequestOptions {
  json?: unknown | undefined;
  query?: Record<string, string | number | undefined> | undefined;
  headers?: Record<string, string> | undefined;
  /** For a `POST`: its `Idempotency-Key` (default: a new one, kept over the retries). */
  idempotencyKey?: string | undefined;
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** A job's result: its media type and bytes. */
export class JobResult {
  constructor(
    readonly contentType: string,
    readonly bytes: Uint8Array,
  ) {}

  text(): string {
    return new TextDecoder().decode(this.bytes);
  }

  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }
}

/** The longest `?wait=` Receipt holds a request for. */
export const MOST_WAIT_SECS = 60;

export class Client {
  private readonly sender: Sender;
  private readonly timeoutMs: number;

  constructor(options: ClientOptions) {
    if (!options || typeof options.baseUrl !== "string" || !/^https?:\/\//.test(options.baseUrl)) {
      throw new TypeError("baseUrl is Receipt's http:// or https:// address");
    }
    if (typeof options.key !== "string" || options.key.length === 0) throw new TypeError("key is an API key of Receipt's");
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.sender = new Sender(
      options.baseUrl.replace(/\/+$/, ""),
      options.key,
      retryPolicy(options.retry),
      new Log(options.logger, options.logLevel),
    );
  }

  /**
   * Any call, with retries; a `POST` gets an `Idempotency-Key`. Answers
   * whatever the status (after the retries); `answer.error()` is its `ApiError`.
   */
  request(method: string, path: string, options: RequestOptions = {}): Promise<Answer> {
    const upper = method.toUpperCase();
    const headers = { ...(options.headers ?? {}) };
    if (upper === "POST") headers["idempotency-key"] = options.idempotencyKey ?? randomUUID();
    return this.sender.send(upper, path, {
      json: options.json,
      query: options.query,
      headers,
      timeoutMs: options.timeoutMs ?? this.timeoutMs,
      retry409: upper === "POST",
      signal: options.signal,
    });
  }

  private async call<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const answer = await this.request(method, path, options);
    if (!answer.ok) throw answer.error();
    return answer.json<T>();
  }

  /** Registers the kind, or changes it (`PUT /v1/kinds/{name}`); the same declaration again changes nothing. */
  registerKind(name: string, declaration: KindDeclaration): Promise<Kind> {
    const body: Record<string, unknown> = {
      params_schema: declaration.paramsSchema,
      timeout_secs: declaration.timeoutSecs,
    };
    if (declaration.maxAttempts !== undefined) body["max_attempts"] = declaration.maxAttempts;
    if (declaration.resultMediaTypes !== undefined) body["result_media_types"] = declaration.resultMediaTypes;
    if (declaration.maxRunning !== undefined) body["max_running"] = declaration.maxRunning;
    if (declaration.priority !== undefined) body["priority"] = declaration.priority;
    if (declaration.about !== undefined) body["about"] = declaration.about;
    return this.call<Kind>("PUT", `/v1/kinds/${encodeURIComponent(name)}`, { json: body });
  }

  /** The registered kind (`GET /v1/kinds/{name}`). */
  kind(name: string): Promise<Kind> {
    return this.call<Kind>("GET", `/v1/kinds/${encodeURIComponent(name)}`);
  }

  /** Deletes the kind: submits are refused from then on; its jobs already made run out. */
  deleteKind(name: string): Promise<{ name: string; active_jobs: number }> {
    return this.call("DELETE", `/v1/kinds/${encodeURIComponent(name)}`);
  }

  /** Submits a job of `kind` (`POST /v1/reports/{kind}`): the job object, `QUEUED`. */
  submit(kind: string, params: Record<string, unknown>, options: SubmitOptions = {}): Promise<Job> {
    const runAt = options.runAt instanceof Date ? options.runAt.toISOString() : options.runAt;
    return this.call<Job>("POST", `/v1/reports/${encodeURIComponent(kind)}`, {
      json: params,
      idempotencyKey: options.idempotencyKey,
      query: { priority: options.priority, delay: options.delay, run_at: runAt },
    });
  }

  /**
   * The job (`GET /v1/jobs/{id}`); with `wait` (seconds, at most 60), held
   * until it is final or the wait ends.
   */
  job(jobId: string, options: { wait?: number | undefined; signal?: AbortSignal | undefined } = {}): Promise<Job> {
    const wait = options.wait === undefined ? undefined : Math.max(0, Math.min(MOST_WAIT_SECS, Math.ceil(options.wait)));
    return this.call<Job>("GET", `/v1/jobs/${encodeURIComponent(jobId)}`, {
      query: { wait },
      timeoutMs: this.timeoutMs + (wait ?? 0) * 1000,
      signal: options.signal,
    });
  }

  /**
   * Waits (with long polls) until the job is final and answers it; throws
   * when `timeoutMs` (default 60 000) passes first.
   */
  async wait(jobId: string, options: { timeoutMs?: number | undefined; signal?: AbortSignal | undefined } = {}): Promise<Job> {
    const until = Date.now() + (options.timeoutMs ?? 60_000);
    for (;;) {
      const left = until - Date.now();
      const job = await this.job(jobId, { wait: Math.max(0, Math.min(MOST_WAIT_SECS, Math.floor(left / 1000))), signal: options.signal });
      if (FINAL_STATUSES.has(job.status)) return job;
      if (Date.now() >= until) {
        throw new Error(`job ${jobId} is still ${job.status} after ${options.timeoutMs ?? 60_000} ms`);
      }
      if (left < 1000) await new Promise((resolve) => setTimeout(resolve, Math.min(100, left)));
    }
  }

  /** Cancels the job (`POST /v1/jobs/{id}/cancel`): the job object. */
  cancel(jobId: string, options: { idempotencyKey?: string | undefined } = {}): Promise<Job> {
    return this.call<Job>("POST", `/v1/jobs/${encodeURIComponent(jobId)}/cancel`, options);
  }

  /** The result of a `SUCCEEDED` job (`GET /v1/jobs/{id}/result`), in the media type it was sent in. */
  async result(jobId: string, options: { accept?: string | undefined } = {}): Promise<JobResult> {
    const answer = await this.request("GET", `/v1/jobs/${encodeURIComponent(jobId)}/result`, {
      headers: options.accept ? { accept: options.accept } : {},
    });
    if (!answer.ok) throw answer.error();
    return new JobResult(answer.headers.get("content-type") ?? "application/octet-stream", answer.body);
  }
}

