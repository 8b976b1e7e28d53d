import { type Logger, type LogFields, type LogLevel, noopLogger } from '../core/logger.js';

/**
 * An inbox's logger: the one its options gave or, when they gave none, one a host may lend later.
 * `relaybus inbox` lends its own, so that `--log-level`, `--log-format` and `--verbose` reach the
 * inbox's lines (held-back messages released, reconnects) instead of dropping them.
 */

const slots = new WeakMap<object, { lent: Logger | undefined }>();

/** The logger `owner` (an inbox) logs through: `given`, or a stand-in that forwards to a lent one. */
export function inboxLogger(owner: object, given: Logger | undefined): Logger {
  if (given !== undefined) return given;
  const slot: { lent: Logger | undefined } = { lent: undefined };
  slots.set(owner, slot);
  const write =
    (level: LogLevel) =>
    (message: string, fields?: LogFields): void =>
      (slot.lent ?? noopLogger)[level](message, fields);
  return Object.freeze({ debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') });
}

/**
 * Let `inbox` log through `logger` when it was made without a logger of its own. Returns false
 * (and changes nothing) when its options gave one.
 *
 * ```ts
 * if (!lendInboxLogger(inbox, cliLogger)) cliLogger.debug(`${inbox.name} logs through its own logger`);
 * ```
 */
export function lendInboxLogger(inbox: object, logger: Logger): boolean {
  const slot = slots.get(inbox);
  if (slot === undefined) return false;
  slot.lent = logger;
  return true;
}
