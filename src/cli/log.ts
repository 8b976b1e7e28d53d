import { describeError } from '../core/logger.js';
import type { LogFields, Logger, LogLevel } from '../index.js';
import type { OutputStream } from './command.js';

/**
 * The worker's logger: its own lines and the library's (passed to `bus.start({ logger })`) in one
 * format. `pretty`: `relaybus worker: <message> key=value ...`, for a terminal. `json`: one object
 * per line, `{"time","level","msg",...fields}`, for log collectors. debug and info go to stdout,
 * warn and error to stderr, so a shell or a container runtime can tell problems apart.
 */

/** The levels `--log-level` takes, least severe first. */
export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const satisfies readonly LogLevel[];

/** The formats `--log-format` takes. */
export const LOG_FORMATS = ['pretty', 'json'] as const;

/** A `--log-format` value. */
export type LogFormat = (typeof LOG_FORMATS)[number];

/** Settings of `createCliLogger`. */
export interface CliLoggerOptions {
  /** Lines below this level are dropped. */
  readonly level: LogLevel;
  readonly format: LogFormat;
  readonly stdout: OutputStream;
  readonly stderr: OutputStream;
  /** Starts every pretty line, e.g. `relaybus worker`. */
  readonly prefix: string;
  /** The clock of the json `time` field (tests). */
  readonly now?: () => Date;
}

const RESERVED = new Set(['time', 'level', 'msg']);

/** A field value as JSON can hold it: errors as `Name: message`, bigints as strings. */
function plain(value: unknown): unknown {
  if (value instanceof Error) return describeError(value);
  if (typeof value === 'bigint') return value.toString();
  return value;
}

function toJsonLine(time: Date, level: LogLevel, message: string, fields: LogFields | undefined): string {
  const record: Record<string, unknown> = { time: time.toISOString(), level, msg: message };
  for (const [key, value] of Object.entries(fields ?? {})) {
    if (value !== undefined) record[RESERVED.has(key) ? `field_${key}` : key] = plain(value);
  }
  try {
    return JSON.stringify(record, (_key, value: unknown) => plain(value));
  } catch {
    // A field JSON cannot hold (a cycle): keep the line, with that field as text.
    const safe = Object.fromEntries(
      Object.entries(record).map(([key, value]) => [
        key,
        typeof value === 'object' && value !== null ? String(value) : value,
      ]),
    );
    return JSON.stringify(safe);
  }
}

/** `key=value`, quoting values with spaces, quotes or `=`. */
function renderField(key: string, value: unknown): string {
  const text =
    typeof value === 'string'
      ? value
      : value instanceof Date
        ? value.toISOString()
        : (JSON.stringify(plain(value)) ?? String(value));
  return `${key}=${/^[^\s"=]+$/.test(text) ? text : JSON.stringify(text)}`;
}

/** One line; a `stack` field (there only with --verbose) follows it on lines of its own, indented. */
function toPrettyLine(prefix: string, message: string, fields: LogFields | undefined): string {
  const { stack, ...rest } = fields ?? {};
  const rendered = Object.entries(rest)
    .filter(([, value]) => value !== undefined)
    .map(([key, value]) => renderField(key, value));
  const line = `${prefix}: ${message}${rendered.length > 0 ? ' ' + rendered.join(' ') : ''}`.replace(/\s*\n\s*/g, ' ');
  if (typeof stack !== 'string' || stack === '') return line;
  return [line, ...stack.split('\n').map((frame) => `    ${frame.trim()}`)].join('\n');
}

/**
 * A `Logger` writing one line per call in `format`, from `level` up.
 *
 * ```ts
 * const log = createCliLogger({ level: 'info', format: 'json', stdout: process.stdout, stderr: process.stderr, prefix: 'relaybus worker' });
 * log.warn('database unreachable', { attempt: 2 }); // {"time":"...","level":"warn","msg":"database unreachable","attempt":2}
 * ```
 */
export function createCliLogger(options: CliLoggerOptions): Logger {
  const min = LOG_LEVELS.indexOf(options.level);
  const now = options.now ?? (() => new Date());
  const write =
    (level: LogLevel) =>
    (message: string, fields?: LogFields): void => {
      if (LOG_LEVELS.indexOf(level) < min) return;
      const line =
        options.format === 'json'
          ? toJsonLine(now(), level, message, fields)
          : toPrettyLine(options.prefix, message, fields);
      (level === 'warn' || level === 'error' ? options.stderr : options.stdout).write(line + '\n');
    };
  return Object.freeze({ debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') });
}
