/**
 * Reports sent together: `POST /v1/work/reports` carries the reports of
 * several attempts, each applied and answered as its own call would be. A
 * report waits while another batch is on its way and goes with the next,
 * so a busy worker sends one call for many attempts and an idle one sends
 * each at once. A result too big for a batch, or a streamed one, goes
 * alone; so does every report of a batch the whole call refused (an api
 * without the route, say).
 */

import { Answer, BytesBody, type Sender } from "./http.js";

/** Reports one call may carry. */
export const MOST_REPORTS = 100;
/** A batch's body stays under Receipt's 1 MiB. */
const MOST_BATCH_BYTES = 960 * 1024;
/** A JSON result over this goes alone, through the attempt's own complete. */
export const MOST_RESULT_IN_BATCH = 64 * 1024;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A JSON result the SDK serialized itself: valid JSON, so a batch can embed it as it is. */
export class JsonDocument extends BytesBody {}

/** One report of a batch, as JSON text; `undefined` when it goes alone. */
export function batchItem(
  token: string,
  traceparent: string | null | undefined,
  outcome:
    | { what: "complete"; body: unknown }
    | { what: "fail"; failure: object }
    | { what: "cancelled" },
): string | undefined {
  const head: Record<string, unknown> = { outcome: outcome.what, token };
  if (traceparent) head.traceparent = traceparent;
  if (outcome.what === "complete") {
    const body = outcome.body;
    if (!(body instanceof JsonDocument) || body.data.length > MOST_RESULT_IN_BATCH) return undefined;
    return `${JSON.stringify(head).slice(0, -1)},"result":${decoder.decode(body.data)}}`;
  }
  if (outcome.what === "fail") return JSON.stringify({ ...head, ...outcome.failure });
  return JSON.stringify(head);
}

interface Pending {
  token: string;
  item: string;
  resolve(answer: Answer | undefined): void;
  reject(error: unknown): void;
}

/** The worker's batches: one call on its way at a time. */
export class Reporter {
  private pending: Pending[] = [];
  private flushing = false;

  constructor(private readonly sender: Sender) {}

  /**
   * Sends `item` in the next batch; its own answer (as an `Answer` of its
   * own call), or `undefined` when the batch call was refused as a whole
   * and the report must go alone.
   */
  report(token: string, item: string): Promise<Answer | undefined> {
    return new Promise((resolve, reject) => {
      this.pending.push({ token, item, resolve, reject });
      if (!this.flushing) {
        this.flushing = true;
        // After the reports that end in this turn of the loop have joined.
        setImmediate(() => void this.flush());
      }
    });
  }

  private take(): Pending[] {
    let size = 0;
    let count = 0;
    for (const entry of this.pending) {
      if (count === MOST_REPORTS || (count > 0 && size + entry.item.length > MOST_BATCH_BYTES)) break;
      size += entry.item.length + 1;
      count += 1;
    }
    return this.pending.splice(0, count);
  }

  private async flush(): Promise<void> {
    try {
      while (this.pending.length > 0) {
        const batch = this.take();
        let answer: Answer;
        try {
          const body = `{"reports":[${batch.map((entry) => entry.item).join(",")}]}`;
          answer = await this.sender.send("POST", "/v1/work/reports", { body: new BytesBody(encoder.encode(body)) });
        } catch (e) {
          for (const entry of batch) entry.reject(e);
          continue;
        }
        settle(batch, answer);
      }
    } finally {
      this.flushing = false;
    }
  }
}

interface OneAnswer {
  token?: unknown;
  status?: unknown;
  body?: unknown;
}

/** Hands each report its own answer; each of a batch the call refused as a whole goes alone. */
function settle(batch: Pending[], answer: Answer): void {
  let answers: OneAnswer[] | undefined;
  if (answer.status === 200) {
    try {
      const parsed = answer.json<{ reports?: unknown }>();
      if (Array.isArray(parsed.reports) && parsed.reports.length === batch.length) answers = parsed.reports as OneAnswer[];
    } catch {
      answers = undefined;
    }
  }
  batch.forEach((entry, i) => {
    const one = answers?.[i];
    if (one === undefined || one.token !== entry.token || typeof one.status !== "number") {
      entry.resolve(undefined);
      return;
    }
    entry.resolve(
      new Answer(
        answer.method,
        answer.url,
        one.status,
        new Headers({ "content-type": "application/json" }),
        encoder.encode(JSON.stringify(one.body ?? null)),
      ),
    );
  });
}
