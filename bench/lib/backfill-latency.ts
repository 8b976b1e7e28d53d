/** The live deliveries' latency in the backfill benchmark: each one's commit (the publisher's clock) to its start. */
import type { BackfillDispatcherResult } from './backfill-bus.js';
import { percentile } from './stats.js';

export interface Latency {
  readonly count: number;
  readonly p50: number;
  readonly p99: number;
}

/** `handler`'s deliveries of the events committed from `from` to `to`: each one's commit and start (wall-clock ms). */
export function committedBetween(
  records: BackfillDispatcherResult['records'],
  handler: number,
  commitOf: Map<number, number>,
  from: number,
  to: number,
): [committedAt: number, startedAt: number][] {
  const out: [number, number][] = [];
  for (let r = 0; r < records.i.length; r += 1) {
    if (records.h[r] !== handler) continue;
    const committedAt = commitOf.get(records.i[r]!);
    if (committedAt === undefined || committedAt < from || committedAt > to) continue;
    out.push([committedAt, records.t[r]!]);
  }
  return out;
}

export function latency(
  records: BackfillDispatcherResult['records'],
  handler: number,
  commitOf: Map<number, number>,
  from: number,
  to: number,
): Latency {
  const values = committedBetween(records, handler, commitOf, from, to).map(
    ([committed, started]) => started - committed,
  );
  return { count: values.length, p50: percentile(values, 50), p99: percentile(values, 99) };
}

/** How many history deliveries (events below `history`) of `handler` started from `from` to `to` (wall-clock ms). */
export function historyStartsBetween(
  records: BackfillDispatcherResult['records'],
  handler: number,
  history: number,
  from: number,
  to: number,
): number {
  let count = 0;
  for (let r = 0; r < records.i.length; r += 1)
    if (records.h[r] === handler && records.i[r]! < history && records.t[r]! >= from && records.t[r]! <= to) count += 1;
  return count;
}
