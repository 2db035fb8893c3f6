/**
 * OpenTelemetry, when `@opentelemetry/api` is installed (it is never
 * required): each attempt runs in a span that continues the trace of the
 * submit that made its job (the lease's `traceparent`), and the attempt's
 * reports carry that span's `traceparent`. Without it nothing happens.
 */

import type { Attempt } from "./attempt.js";
import type { Log } from "./log.js";
import { VERSION } from "./version.js";

/** The part of a span context the SDK reads. */
export interface SpanContextLike {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean | undefined;
}

/** The part of a span the SDK uses. */
export interface SpanLike {
  spanContext(): SpanContextLike;
  setAttribute(key: string, value: string | number | boolean): unknown;
  recordException(exception: Error | string): void;
  setStatus(status: { code: number; message?: string }): unknown;
  end(): void;
}

/**
 * The part of `@opentelemetry/api` the SDK uses; the module itself fits
 * (`import * as otel from "@opentelemetry/api"`).
 */
export interface OpenTelemetryApi {
  trace: {
    getTracer(name: string, version?: string): {
      startSpan(name: string, options?: { kind?: number; attributes?: Record<string, string | number> }, context?: never): SpanLike;
    };
    setSpan(context: never, span: never): unknown;
    setSpanContext(context: never, spanContext: never): unknown;
  };
  context: {
    active(): unknown;
    with<T>(context: never, fn: () => T): T;
  };
  ROOT_CONTEXT: unknown;
  SpanKind: { CONSUMER: number };
  SpanStatusCode: { ERROR: number };
}

export const SPAN_NAME = "receipt.attempt";
const OTEL_MODULE = "@opentelemetry/api";

/** `@opentelemetry/api` when it can be imported, else null. */
export async function loadOpenTelemetry(
  option: OpenTelemetryApi | false | undefined,
  log: Log,
): Promise<OpenTelemetryApi | null> {
  if (option === false) return null;
  if (option) return option;
  let module: Record<string, unknown>;
  try {
    module = (await import(OTEL_MODULE)) as Record<string, unknown>;
  } catch {
    return null;
  }
  const api = (module["trace"] ? module : (module["default"] as Record<string, unknown> | undefined)) ?? {};
  if (!api["trace"] || !api["context"]) {
    log.warn(`${OTEL_MODULE} was found but does not look like it: attempts are not traced`);
    return null;
  }
  log.debug(`${OTEL_MODULE} found: each attempt runs in a span`);
  return api as unknown as OpenTelemetryApi;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** A W3C `traceparent` as a span context, or null when it is not a valid one. */
export function parseTraceparent(value: string | null | undefined): SpanContextLike | null {
  const m = value ? TRACEPARENT.exec(value.trim().toLowerCase()) : null;
  if (!m) return null;
  const [, version, traceId, spanId, flags, rest] = m as unknown as [string, string, string, string, string, string?];
  if (version === "ff" || (version === "00" && rest)) return null;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return null;
  return { traceId, spanId, traceFlags: parseInt(flags, 16), isRemote: true };
}

/** The `traceparent` naming a span context, or null when it is not valid. */
export function formatTraceparent(context: SpanContextLike): string | null {
  const { traceId, spanId, traceFlags } = context;
  if (!/^[0-9a-f]{32}$/.test(traceId) || /^0+$/.test(traceId)) return null;
  if (!/^[0-9a-f]{16}$/.test(spanId) || /^0+$/.test(spanId)) return null;
  return `00-${traceId}-${spanId}-${(traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/**
 * Runs `fn` in a span `receipt.attempt <kind>` whose parent is the lease's
 * traceparent (else the active context); `onSpan` gets the span's own
 * traceparent before `fn` starts. Without OpenTelemetry, runs `fn` alone.
 */
export async function inAttemptSpan<T>(
  otel: OpenTelemetryApi | null,
  attempt: Attempt<unknown>,
  onSpan: (traceparent: string | null) => void,
  fn: () => Promise<T>,
): Promise<T> {
  if (!otel) return fn();
  const remote = parseTraceparent(attempt.traceparent);
  const parent = remote ? otel.trace.setSpanContext(otel.ROOT_CONTEXT as never, remote as never) : otel.context.active();
  const span = otel.trace
    .getTracer("@receipt/worker", VERSION)
    .startSpan(
      `${SPAN_NAME} ${attempt.kind}`,
      {
        kind: otel.SpanKind.CONSUMER,
        attributes: {
          "receipt.job_id": attempt.jobId,
          "receipt.kind": attempt.kind,
          "receipt.attempt": attempt.attempt,
          "receipt.max_attempts": attempt.maxAttempts,
        },
      },
      parent as never,
    );
  onSpan(formatTraceparent(span.spanContext()));
  try {
    const value = await otel.context.with(otel.trace.setSpan(parent as never, span as never) as never, fn);
    span.setAttribute("receipt.outcome", "complete");
    return value;
  } catch (e) {
    span.recordException(e instanceof Error ? e : String(e));
    span.setStatus({ code: otel.SpanStatusCode.ERROR, message: (e instanceof Error ? e.message : String(e)).slice(0, 200) });
    span.setAttribute("receipt.outcome", attempt.stopReason === "cancel_requested" ? "cancelled" : "fail");
    throw e;
  } finally {
    span.end();
  }
}
