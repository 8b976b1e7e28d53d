import { setTimeout as sleep } from 'node:timers/promises';
import { describeError } from '../core/logger.js';
import { isRetryableError, type LogFields, type Logger } from '../index.js';
import { RetryBackoff } from '../core/retry-backoff.js';

/**
 * The worker's start: `bus.start()` (the store's setup, then the dispatcher) retried while the
 * database cannot be reached, with the dispatcher's capped backoff (250 ms doubling to 30 s,
 * jittered). A failed setup leaves the bus idle, so it can be started again. Errors a retry cannot
 * fix (bad credentials, a missing database, a schema newer than the code) end the retries.
 */

/** Settings of `startWithRetry`. */
export interface StartRetryOptions {
  /** One attempt: `bus.start(...)`. */
  readonly start: () => Promise<void>;
  readonly logger: Logger;
  /** Aborted when the worker is asked to stop: no further attempt is made. */
  readonly signal: AbortSignal;
  readonly backoff?: RetryBackoff;
  /** Added to every retry line (e.g. that DATABASE_URL is not set). */
  readonly fields?: LogFields;
}

/**
 * Resolve `'started'` once a start succeeded, `'stopped'` when `signal` aborted first; reject with
 * the first error `isRetryableError` says a retry cannot fix. Logs one line per failed attempt,
 * with the time of the next one, and one when the database answers again.
 */
export async function startWithRetry(options: StartRetryOptions): Promise<'started' | 'stopped'> {
  const backoff = options.backoff ?? new RetryBackoff();
  const since = Date.now();
  for (;;) {
    if (options.signal.aborted) return 'stopped';
    try {
      await options.start();
      if (backoff.failures > 0) {
        options.logger.info('database reachable again; the store is set up', {
          failedAttempts: backoff.failures,
          unreachableForMs: Date.now() - since,
        });
      }
      return 'started';
    } catch (error) {
      if (options.signal.aborted) return 'stopped';
      if (!isRetryableError(error)) throw error;
      const delayMs = backoff.failed();
      const attempt = backoff.failures;
      options.logger.warn(
        attempt === 1
          ? 'database unreachable; starting again after a backoff'
          : 'database still unreachable; starting again after a backoff',
        {
          attempt,
          retryAt: new Date(Date.now() + delayMs).toISOString(),
          retryInMs: delayMs,
          error: describeError(error),
          ...options.fields,
        },
      );
      try {
        await sleep(delayMs, undefined, { signal: options.signal });
      } catch {
        return 'stopped';
      }
    }
  }
}
