/**
 * The library logs only through an injected `Logger`, silent by default (`noopLogger`). Fields are
 * structured data (ids, counts, errors), never interpolated into the message, so any structured
 * logger (pino, winston, console) can be adapted in a few lines.
 */

/** Structured context of one log line. */
export type LogFields = Readonly<Record<string, unknown>>;

/**
 * What relaybus needs of a logger. Adapt pino with
 * `{ debug: (m, f) => pino.debug(f, m), info: ..., warn: ..., error: ... }`.
 */
export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

/** Log levels in increasing severity. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error'];

function noop(): void {}

/** Drops every line: the library default. */
export const noopLogger: Logger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop });

/**
 * A logger writing `[relaybus] level message {fields}` to the console, from `level` up.
 *
 * ```ts
 * const bus = createRelayBus({ store, events, logger: createConsoleLogger({ level: 'debug' }) });
 * ```
 */
export function createConsoleLogger(options: { readonly level?: LogLevel } = {}): Logger {
  const min = LEVELS.indexOf(options.level ?? 'info');
  if (min < 0) throw new TypeError(`Unknown log level ${JSON.stringify(options.level)}; use one of ${LEVELS.join(', ')}.`);
  const write = (level: LogLevel) =>
    LEVELS.indexOf(level) < min
      ? noop
      : (message: string, fields?: LogFields): void => {
          const line = `[relaybus] ${level} ${message}`;
          if (fields === undefined || Object.keys(fields).length === 0) console[level](line);
          else console[level](line, fields);
        };
  return Object.freeze({ debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') });
}

/** A console logger at level `info` (what the CLI uses). */
export const consoleLogger: Logger = createConsoleLogger();

/** The message and name of anything thrown, for log fields and recorded errors. */
export function describeError(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}
