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
