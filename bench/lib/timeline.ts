import { percentile } from './stats.js';

/** Milliseconds per bucket of BENCH_TIMELINE. */
const TIMELINE_BUCKET_MS = 50;

/**
 * BENCH_TIMELINE=1: handler starts per 50 ms from "go", to see a drain's shape (the ramp of its first claims, gaps where
 * every loop waits for a claim, its tail) beside the one rate the report gives. `only` picks the starts counted (by
 * index into `starts`; all when absent).
 */
export function timeline(starts: Float64Array, go: number, only?: (index: number) => boolean): string {
  const buckets: number[] = [];
  for (let index = 0; index < starts.length; index += 1) {
    if (only !== undefined && !only(index)) continue;
    const bucket = Math.max(0, Math.floor((starts[index]! - go) / TIMELINE_BUCKET_MS));
    buckets[bucket] = (buckets[bucket] ?? 0) + 1;
  }
  return `handler starts per ${TIMELINE_BUCKET_MS} ms from go: ${Array.from(buckets, (count) => count ?? 0).join(' ')}`;
}

/**
 * BENCH_TIMELINE=1 in the backfill cell: per second from `from`, the live handler's deliveries (count, p50, p99 of
 * commit to start) beside the history deliveries the replayed handler started, so a latency spike can be matched to
 * the backfill's phase.
 */
export function backfillTimeline(
  records: { readonly i: ArrayLike<number>; readonly h: ArrayLike<number>; readonly t: ArrayLike<number> },
  commitOf: ReadonlyMap<number, number>,
  history: number,
  from: number,
  to: number,
): string[] {
  const live: number[][] = [];
  const replayed: number[] = [];
  for (let r = 0; r < records.i.length; r += 1) {
    const id = records.i[r]!;
    if (records.h[r] === 1 && id < history) {
      const second = Math.floor((records.t[r]! - from) / 1000);
      if (second >= 0) replayed[second] = (replayed[second] ?? 0) + 1;
      continue;
    }
    const committedAt = commitOf.get(id);
    if (records.h[r] !== 0 || committedAt === undefined || committedAt < from || committedAt > to) continue;
    const second = Math.floor((committedAt - from) / 1000);
    (live[second] ??= []).push(records.t[r]! - committedAt);
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
