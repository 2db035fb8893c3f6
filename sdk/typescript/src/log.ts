/** Where the SDK's log lines go: `console` by default, or any object with these methods. */
export interface Logger {
  debug(message: string, ...rest: unknown[]): void;
  info(message: string, ...rest: unknown[]): void;
  warn(message: string, ...rest: unknown[]): void;
  error(message: string, ...rest: unknown[]): void;
}

export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

/** Drops the lines below `level`, prefixes the others with `[receipt-worker]`. */
export class Log {
  private readonly min: number;

  constructor(
    private readonly sink: Logger = console,
    level: LogLevel = "info",
  ) {
    if (!(level in RANK)) throw new TypeError(`logLevel is debug, info, warn, error or silent, not ${String(level)}`);
    this.min = RANK[level];
  }

  enabled(level: Exclude<LogLevel, "silent">): boolean {
    return RANK[level] >= this.min;
  }

  debug(message: string, ...rest: unknown[]): void {
    if (this.enabled("debug")) this.sink.debug(`[receipt-worker] ${message}`, ...rest);
  }

  info(message: string, ...rest: unknown[]): void {
    if (this.enabled("info")) this.sink.info(`[receipt-worker] ${message}`, ...rest);
  }

  warn(message: string, ...rest: unknown[]): void {
    if (this.enabled("warn")) this.sink.warn(`[receipt-worker] ${message}`, ...rest);
  }

  error(message: string, ...rest: unknown[]): void {
    if (this.enabled("error")) this.sink.error(`[receipt-worker] ${message}`, ...rest);
  }
}
