/**
 * The library logs only through an injected `Logger`, silent by default (`noopLogger`). Fields are
 * structured data (ids, counts, errors), never interpolated into the message, so any structured
 * logger (pino, winston, console) can be adapted in a few lines.
 */

/** Structured context of one log line. */
export type LogFields = Readonly<Record<string, unknown>>;

/**
 * What relaybus needs of a logger: `(message, fields)` methods. A pino or bunyan logger, whose
 * methods take `(fields, message)`, is accepted as is and adapted (see `adaptLogger`).
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
  if (min < 0)
    throw new TypeError(`Unknown log level ${JSON.stringify(options.level)}; use one of ${LEVELS.join(', ')}.`);
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

/**
 * True for a logger whose methods take the fields first and the message second, `(fields, message)`:
 * pino (recognised by its `levels.values` map) and bunyan (`addStream` and `fields`). Such a logger
 * type-checks as a `Logger` but would drop every field, so `adaptLogger` turns the arguments round.
 */
export function isObjectFirstLogger(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const logger = value as { child?: unknown; levels?: { values?: unknown }; addStream?: unknown; fields?: unknown };
  if (typeof logger.child !== 'function') return false;
  const pino = typeof logger.levels === 'object' && logger.levels !== null && typeof logger.levels.values === 'object';
  const bunyan = typeof logger.addStream === 'function' && typeof logger.fields === 'object';
  return pino || bunyan;
}

/** Field values as a structured logger serialises them well: errors as `Name: message` (their stack under `stack` stays). */
function structured(fields: LogFields): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) {
    if (value !== undefined) out[key] = value instanceof Error ? describeError(value) : value;
  }
  return out;
}

/**
 * `logger` as relaybus calls it: a pino or bunyan logger (see `isObjectFirstLogger`) is wrapped so that
 * each line is `logger.level(fields, message)` and keeps its structured fields; any other logger is
 * returned as it is. `createRelayBus({ logger })` and `bus.start({ logger })` apply it.
 *
 * ```ts
 * import pino from 'pino';
 * const bus = createRelayBus({ store, events, logger: pino() }); // adapted: fields stay fields
 * ```
 */
export function adaptLogger(logger: Logger): Logger {
  if (!isObjectFirstLogger(logger)) return logger;
  const target = logger as unknown as Record<LogLevel, (fields: object, message?: string) => void>;
  const write =
    (level: LogLevel) =>
    (message: string, fields?: LogFields): void => {
      target[level](fields === undefined ? {} : structured(fields), message);
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
