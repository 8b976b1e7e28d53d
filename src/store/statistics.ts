import type { HandlerStatistics, Statistics } from './contract.js';

/** The store-wide figures of `statistics()`: each count summed over the handlers, the oldest due age their maximum. */
export function withTotals(handlers: Readonly<Record<string, HandlerStatistics>>, lanesLeased: number): Statistics {
  const total = { pending: 0, due: 0, scheduled: 0, inFlight: 0, dead: 0, completed: 0 };
  let oldestDueAgeMs: number | null = null;
  for (const stats of Object.values(handlers)) {
    total.pending += stats.pending;
    total.due += stats.due;
    total.scheduled += stats.scheduled;
    total.inFlight += stats.inFlight;
    total.dead += stats.dead;
    total.completed += stats.completed;
    if (stats.oldestDueAgeMs !== null) oldestDueAgeMs = Math.max(oldestDueAgeMs ?? 0, stats.oldestDueAgeMs);
  }
  return { ...total, oldestDueAgeMs, handlers, lanesLeased };
}
