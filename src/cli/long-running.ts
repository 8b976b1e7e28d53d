import { RelayBusError, type Logger, type Store } from '../index.js';
import { choiceFlag } from './args.js';
import { CliFailure, UsageError, type CliContext } from './command.js';
import { createCliLogger, LOG_FORMATS, LOG_LEVELS } from './log.js';

/**
 * What the long-running commands (`relaybus worker`, `relaybus inbox`) share: their logging flags,
 * how long they wait after a forced stop and for the store to close, and how an unexpected error
 * becomes their one-line failure.
 */

/** After a second signal the process exits within this long, whether or not the forced stop finished. */
export const FORCE_DEADLINE_MS = 3_000;
/** How long the process waits for `store.close()` before exiting anyway. */
export const CLOSE_DEADLINE_MS = 2_000;

/** The `--log-level` and `--log-format` flags. */
export const LOG_FLAGS = {
  'log-level': {
    type: 'string',
    value: 'level',
    description: 'Least severe log line printed: debug, info, warn or error. Default: info.',
  },
  'log-format': {
    type: 'string',
    value: 'format',
    description:
      'pretty (a readable line each) or json (one object per line: time, level, msg and fields). Default: pretty.',
  },
} as const;

/** The command's logger, from its `--log-level` and `--log-format` values. */
export function loggerFromFlags(
  values: { readonly 'log-level'?: string; readonly 'log-format'?: string },
  context: CliContext,
  prefix: string,
): Logger {
  return createCliLogger({
    level: choiceFlag('log-level', values['log-level'], LOG_LEVELS) ?? 'info',
    format: choiceFlag('log-format', values['log-format'], LOG_FORMATS) ?? 'pretty',
    stdout: context.stdout,
    stderr: context.stderr,
    prefix,
  });
}

/** Close the store, giving up after `CLOSE_DEADLINE_MS` (the process exits right after). */
export async function closeStoreInTime(store: Pick<Store<unknown>, 'close'>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    store.close().catch(() => {}),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_DEADLINE_MS))),
  ]);
  clearTimeout(timer);
}

/** Run the command; an error that is not already one of ours becomes `CliFailure("the <what> failed: ...")`. */
export async function failingAs<T>(what: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof RelayBusError || error instanceof UsageError || error instanceof CliFailure) throw error;
    throw new CliFailure(`the ${what} failed: ${error instanceof Error ? error.message : String(error)}`, {
      cause: error,
    });
  }
}
