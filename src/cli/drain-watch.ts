import { setTimeout as sleep } from 'node:timers/promises';
import { isRetryableError, type HandlerStatistics, type Statistics } from '../index.js';

/**
 * `relaybus worker --once`: decide when the work that was due is drained. The worker's own
 * dispatcher does the work; this only watches `store.statistics()`: done when none of the worker's
 * handlers has a delivery due or in flight. Keyed deliveries that wait behind the head of their key
 * while it backs off count as due but cannot be claimed; so `--once` also ends when nothing ran and
 * nothing due was claimed for `stallMs`.
 */

/** Settings of `waitUntilDrained`. */
export interface DrainWatchOptions {
  readonly statistics: () => Promise<Statistics>;
  /** The handlers the worker runs; undefined: every handler with deliveries in the store. */
  readonly handlers: readonly string[] | undefined;
  /** How many outcomes (delivered, failed, dead) the worker has seen so far: progress. */
  readonly progress: () => number;
  /** Pause between two looks at the statistics. */
  readonly intervalMs: number;
  /** Give up on due-but-unclaimable deliveries after this long without progress. */
  readonly stallMs: number;
  readonly signal?: AbortSignal;
}

/** Sum of `due` and `inFlight` over `handlers` (or over every handler). */
export function dueAndInFlight(
  stats: Statistics,
  handlers: readonly string[] | undefined,
): { due: number; inFlight: number } {
  const rows: HandlerStatistics[] =
    handlers === undefined
      ? Object.values(stats.handlers)
      : handlers.flatMap((name) => (stats.handlers[name] ? [stats.handlers[name]] : []));
  return rows.reduce((sum, row) => ({ due: sum.due + row.due, inFlight: sum.inFlight + row.inFlight }), {
    due: 0,
    inFlight: 0,
  });
}

/**
 * Resolve once nothing due is left for `handlers` (see the module header), or when `signal` aborts.
 * Rejects when reading the statistics fails with an error a retry cannot fix.
 */
export async function waitUntilDrained(options: DrainWatchOptions): Promise<'drained' | 'stalled' | 'aborted'> {
  let lastProgress = options.progress();
  let quietSince = Date.now();
  while (!options.signal?.aborted) {
    try {
      await sleep(options.intervalMs, undefined, { signal: options.signal });
    } catch {
      return 'aborted';
    }
    let stats: Statistics;
    try {
      stats = await options.statistics();
    } catch (error) {
      if (isRetryableError(error)) continue; // the database is away: the dispatcher retries too; look again later
      throw error;
    }
    const { due, inFlight } = dueAndInFlight(stats, options.handlers);
    if (due === 0 && inFlight === 0) return 'drained';
    const progress = options.progress();
    if (inFlight > 0 || progress !== lastProgress) {
      lastProgress = progress;
      quietSince = Date.now();
    } else if (Date.now() - quietSince >= options.stallMs) {
      return 'stalled';
    }
  }
  return 'aborted';
}
