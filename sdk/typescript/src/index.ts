/**
 * @receipt/worker: run your own report kinds for Receipt in Node, over
 * Receipt's worker protocol (lease, heartbeat, complete, fail, cancelled).
 */

export { Attempt, type LeasedAttempt, type Priority } from "./attempt.js";
export {
  Client,
  FINAL_STATUSES,
  JobResult,
  MOST_WAIT_SECS,
  type ClientOptions,
  type Job,
  type JobStatus,
  type Kind,
  type KindDeclaration,
  type RequestOptions,
  type SubmitOptions,
} from "./client.js";
export {
  ApiError,
  Cancelled,
  ConnectionFailed,
  Permanent,
  ReceiptError,
  Retryable,
  type FailureOptions,
  type FieldError,
  type Problem,
  type StopReason,
} from "./errors.js";
export { Answer, DEFAULT_RETRY, type RetryPolicy } from "./http.js";
export type { LogLevel, Logger } from "./log.js";
export { InvalidResult, SourceFailed, StreamResult, stream, type Chunk, type StreamSource } from "./results.js";
export type { OpenTelemetryApi, SpanContextLike, SpanLike } from "./tracing.js";
export { VERSION } from "./version.js";
export { Worker, errorTypeOf, failureOf, type Failure, type Handler, type WorkerOptions } from "./worker.js";
