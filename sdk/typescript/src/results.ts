/**
 * What a handler returns. Anything that is not a `StreamResult` is sent as
 * a JSON document (`application/json`, at most 1 MiB); a `StreamResult`
 * (made by `stream()` or `worker.stream()`) sends bytes in one of the
 * kind's declared `result_media_types` (at most 256 MiB), streamed.
 */

import { randomUUID } from "node:crypto";
import { open, unlink, type FileHandle } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { BytesBody, type RequestBody } from "./http.js";
import { JsonDocument } from "./reports.js";

/** A piece of a streamed result: bytes, or text sent as UTF-8. */
export type Chunk = Uint8Array | string;

/** A streamed result's body: whole, or pieces produced as it goes (a Node `Readable` is one). */
export type StreamSource = Uint8Array | string | Iterable<Chunk> | AsyncIterable<Chunk>;

/** Past this, a streamed result kept for its retries goes to a temporary file. */
export const SPOOL_IN_MEMORY = 8 * 1024 * 1024;
const READ_BACK = 256 * 1024;

/** A result in a media type the kind declares; see `stream()`. */
export class StreamResult {
  constructor(
    readonly mediaType: string,
    readonly source: StreamSource,
  ) {}
}

/**
 * A result in a media type the kind declares (`result_media_types`), such
 * as `stream("text/csv", rows())`: bytes or a string sent whole, or an
 * iterable or async iterable of pieces (`Uint8Array` or string) sent as
 * they come, never held whole in memory. A copy is kept (in memory up to
 * 8 MiB, then in a temporary file) so that the complete can be sent again,
 * byte for byte, when its answer is lost. An error thrown while the pieces
 * are produced ends the attempt as a handler's error does.
 */
export function stream(mediaType: string, body: StreamSource): StreamResult {
  if (typeof mediaType !== "string" || !/^[^\s/;]+\/[^\s/;]+$/.test(mediaType.trim())) {
    throw new TypeError(`a media type is type/subtype, such as text/csv, not ${JSON.stringify(mediaType)}`);
  }
  if (!isSource(body)) {
    throw new TypeError("a streamed result is a Uint8Array, a string, or an iterable or async iterable of them");
  }
  return new StreamResult(mediaType.trim(), body);
}

function isSource(body: unknown): body is StreamSource {
  if (typeof body === "string" || body instanceof Uint8Array) return true;
  if (body === null || typeof body !== "object") return false;
  return Symbol.asyncIterator in body || Symbol.iterator in body;
}

/** A handler returned something that cannot be sent. */
export class InvalidResult extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InvalidResult";
  }
}

/** The source of a streamed result threw; `error` is what it threw. */
export class SourceFailed extends Error {
  constructor(readonly error: unknown) {
    super(`the result's stream failed: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`, {
      cause: error,
    });
    this.name = "SourceFailed";
  }
}

const encoder = new TextEncoder();

function toBytes(piece: unknown): Uint8Array {
  if (typeof piece === "string") return encoder.encode(piece);
  // A copy: the source may reuse its buffer once it is handed back.
  if (piece instanceof Uint8Array) return piece.slice();
  throw new InvalidResult(`a streamed result's pieces are Uint8Array or string, not ${typeName(piece)}`);
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "object") return (value as object).constructor?.name ?? "object";
  return typeof value;
}

/** What has been read of a streamed result, to send it again. */
class Spool {
  private memory: Uint8Array[] = [];
  private memoryBytes = 0;
  private file: FileHandle | undefined;
  private path: string | undefined;
  private fileBytes = 0;

  async write(data: Uint8Array): Promise<void> {
    if (data.length === 0) return;
    if (!this.file && this.memoryBytes + data.length <= SPOOL_IN_MEMORY) {
      this.memory.push(data);
      this.memoryBytes += data.length;
      return;
    }
    if (!this.file) {
      this.path = join(tmpdir(), `receipt-worker-${randomUUID()}.spool`);
      this.file = await open(this.path, "w+", 0o600);
      for (const piece of this.memory) await this.append(piece);
      this.memory = [];
      this.memoryBytes = 0;
    }
    await this.append(data);
  }

  private async append(data: Uint8Array): Promise<void> {
    let written = 0;
    while (written < data.length) {
      const { bytesWritten } = await this.file!.write(data, written, data.length - written, this.fileBytes);
      written += bytesWritten;
      this.fileBytes += bytesWritten;
    }
  }

  async *replay(): AsyncGenerator<Uint8Array> {
    if (!this.file) {
      yield* this.memory;
      return;
    }
    let position = 0;
    while (position < this.fileBytes) {
      const buffer = new Uint8Array(Math.min(READ_BACK, this.fileBytes - position));
      const { bytesRead } = await this.file.read(buffer, 0, buffer.length, position);
      if (bytesRead === 0) throw new Error("the spooled result is shorter than what was written");
      position += bytesRead;
      yield buffer.subarray(0, bytesRead);
    }
  }

  async close(): Promise<void> {
    this.memory = [];
    const file = this.file;
    this.file = undefined;
    if (file) {
      await file.close().catch(() => undefined);
      await unlink(this.path!).catch(() => undefined);
    }
  }
}

/**
 * A streamed result as a request body: the first try sends the pieces as
 * they come (keeping a copy); a later try first reads what the first did
 * not, then sends the copy.
 */
export class StreamBody implements RequestBody {
  private iterator: AsyncIterator<unknown> | Iterator<unknown> | undefined;
  private started = false;
  private complete = false;
  private error: Error | undefined;
  private pulling: Promise<unknown> = Promise.resolve();
  private readonly spool = new Spool();

  constructor(
    private readonly source: Iterable<Chunk> | AsyncIterable<Chunk>,
    readonly contentType: string,
  ) {}

  forTry(): AsyncIterable<Uint8Array> {
    if (!this.started) {
      this.started = true;
      const source = this.source;
      this.iterator =
        Symbol.asyncIterator in source
          ? (source as AsyncIterable<Chunk>)[Symbol.asyncIterator]()
          : (source as Iterable<Chunk>)[Symbol.iterator]();
      return this.firstPass();
    }
    return this.replay();
  }

  failure(): Error | undefined {
    return this.error;
  }

  /** The next piece (null at the end), read one at a time. */
  private next(): Promise<Uint8Array | null> {
    const piece = this.pulling.then(() => this.pull());
    this.pulling = piece.catch(() => undefined);
    return piece;
  }

  private async pull(): Promise<Uint8Array | null> {
    if (this.error) throw this.error;
    if (this.complete) return null;
    try {
      const step = await this.iterator!.next();
      if (step.done) {
        this.complete = true;
        return null;
      }
      const data = toBytes(step.value);
      await this.spool.write(data);
      return data;
    } catch (e) {
      this.error = e instanceof InvalidResult ? e : new SourceFailed(e);
      throw this.error;
    }
  }

  private async *firstPass(): AsyncGenerator<Uint8Array> {
    for (;;) {
      const data = await this.next();
      if (data === null) return;
      if (data.length > 0) yield data;
    }
  }

  private async *replay(): AsyncGenerator<Uint8Array> {
    while ((await this.next()) !== null) {
      // reads what the first try did not, into the copy
    }
    yield* this.spool.replay();
  }

  /** Frees the copy, and ends the source when it was not read to its end. */
  async close(): Promise<void> {
    const iterator = this.iterator;
    if (iterator && !this.complete && !this.error && typeof iterator.return === "function") {
      try {
        await iterator.return();
      } catch {
        // the source's own cleanup failed: nothing to do about it here
      }
    }
    await this.spool.close();
  }
}

/** The complete's body for what a handler returned. */
export function bodyOf(value: unknown): RequestBody {
  if (value instanceof StreamResult) {
    const source = value.source;
    if (typeof source === "string") return new BytesBody(encoder.encode(source), value.mediaType);
    if (source instanceof Uint8Array) return new BytesBody(source.slice(), value.mediaType);
    return new StreamBody(source, value.mediaType);
  }
  if (value instanceof Uint8Array || value instanceof ArrayBuffer) {
    throw new InvalidResult(
      "a handler returned bytes: return worker.stream(mediaType, bytes) with a media type the kind declares",
    );
  }
  if (value !== null && typeof value === "object" && Symbol.asyncIterator in value) {
    throw new InvalidResult(
      "a handler returned an async iterable: return worker.stream(mediaType, iterable) with a media type the kind declares",
    );
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(value === undefined ? null : value);
  } catch (e) {
    throw new InvalidResult(`the result is not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (text === undefined) throw new InvalidResult(`the result is not JSON: a ${typeof value}`);
  return new JsonDocument(encoder.encode(text), "application/json");
}

/** Frees what a body kept for its retries. */
export async function closeBody(body: RequestBody): Promise<void> {
  if (body instanceof StreamBody) await body.close();
}
