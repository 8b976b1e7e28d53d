/** The live deliveries' latency in the backfill benchmark: each one's commit (the publisher's clock) to its start. */
import type { BackfillDispatcherResult } from './backfill-bus.js';
import { percentile } from './stats.js';

export interface Latency {
  readonly count: number;
  readonly p50: number;
  readonly p99: number;
}

/** `handler`'s deliveries of the events committed from `from` to `to`: each one's commit and start (machine-clock ms). */
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

/** The start times (machine-clock ms) of `handler`'s history deliveries (events below `history`). */
export function historyStarts(
  records: BackfillDispatcherResult['records'],
  handler: number,
  history: number,
): number[] {
  const out: number[] = [];
  for (let r = 0; r < records.i.length; r += 1)
    if (records.h[r] === handler && records.i[r]! < history) out.push(records.t[r]!);
  return out;
}

/**
 * BENCH_TIMELINE=1 in the backfill cell: per second from `from`, the live handler's (0) deliveries committed until `to`
 * (count, p50, p99 of commit to start) beside the history deliveries the replayed handler (1) started, so a latency
 * spike can be matched to the backfill's phase.
 */
export function backfillTimeline(
  records: BackfillDispatcherResult['records'],
  commitOf: Map<number, number>,
  history: number,
  from: number,
  to: number,
): string[] {
  const live: number[][] = [];
  for (const [committedAt, startedAt] of committedBetween(records, 0, commitOf, from, to))
    (live[Math.floor((committedAt - from) / 1000)] ??= []).push(startedAt - committedAt);
  const replayed: number[] = [];
  for (const startedAt of historyStarts(records, 1, history)) {
    const second = Math.floor((startedAt - from) / 1000);
    if (second >= 0) replayed[second] = (replayed[second] ?? 0) + 1;
  }
  const lines: string[] = [];
  for (let second = 0; second < Math.max(live.length, replayed.length); second += 1) {
    const waits = live[second] ?? [];
    const at = (p: number): string => (waits.length ? percentile(waits, p).toFixed(1) : '-');
    lines.push(
      `s${second}: live ${waits.length} p50 ${at(50)} p99 ${at(99)} max ${at(100)} ms; history started ${replayed[second] ?? 0}`,
    );
  }
  return lines;
}
