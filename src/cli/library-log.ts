import type { LogFields, Logger, LogLevel } from '../index.js';

/**
 * The logger `relaybus worker` gives the library (`bus.start({ logger })`). A failed handler attempt
 * is one line at the default level: the worker's own outcome line (`<handler> failed on delivery
 * ...`), with the stack only under `--verbose`. The library's line about the same attempt (it carries
 * `deliveryId` and `stack`) goes to debug without its stack, and other library lines lose their
 * `stack` field unless `--verbose`.
 */

/** A handler-attempt failure line of the library: the worker's `failed` / `dead` lines repeat it. */
function isAttemptFailure(fields: LogFields | undefined): boolean {
  return fields !== undefined && 'stack' in fields && 'deliveryId' in fields && !('write' in fields);
}

function withoutStack(fields: LogFields): LogFields {
  const { stack: _stack, ...rest } = fields;
  return rest;
}

/**
 * `log` as the library should use it.
 *
 * ```ts
 * await bus.start({ logger: libraryLogger(log, { verbose: values.verbose === true }) });
 * ```
 */
export function libraryLogger(log: Logger, options: { readonly verbose: boolean }): Logger {
  const write =
    (level: LogLevel) =>
    (message: string, fields?: LogFields): void => {
      if (fields === undefined || !('stack' in fields)) log[level](message, fields);
      else if (isAttemptFailure(fields)) log.debug(message, withoutStack(fields));
      else log[level](message, options.verbose ? fields : withoutStack(fields));
    };
  return Object.freeze({ debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') });
}
