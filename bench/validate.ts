/**
 * Exactness of one run. For every (event, handler) pair the handled set must equal the published
 * set (lost 0, unexpected 0), no pair may run twice (duplicates 0), and the contender must end with
 * nothing pending and nothing dead-lettered. For ordered runs (keyed events, a contender that
 * orders keys), per (handler, key):
 *   - order: deliveries start in publish order. Starts are sorted by time and, on equal times, in
 *     reverse publish order, so a tie always counts as a violation (never in the contender's favour),
 *     except between two starts one dispatcher process recorded: its handlers run on one thread, so
 *     the order it recorded them in is the order they started (the epoch-based times are doubles,
 *     about 0.24 µs apart at today's dates, and two starts of a key in one process can be closer);
 *   - overlap: no delivery starts before the previous one of its (handler, key) has ended (handler
 *     end times from the records; no-op handlers end as they start), plus the overlaps the
 *     dispatcher processes saw themselves (an in-process "running" marker per (handler, key)).
 * A run that fails any check is INVALID: its figures are kept in the JSON for diagnosis but never
 * reported.
 */
import { keyNumber, type KeyMap } from './lib/keys.js';
import { HANDLERS, type Remaining } from './lib/types.js';

export interface Records {
  readonly i: Int32Array;
  readonly h: Uint8Array;
  readonly t: Float64Array;
  readonly e: Float64Array;
  /** Which dispatcher process recorded each (`mergeRecords`); absent: unknown, a tie is a violation. */
  readonly p?: Uint8Array;
}

export interface Exactness {
  readonly valid: boolean;
  readonly expected: number;
  readonly handled: number;
  readonly lost: number;
  readonly unexpected: number;
  readonly duplicates: number;
  /** null: the run is not ordered (unkeyed, or a contender without ordering), so it was not checked. */
  readonly orderViolations: number | null;
  /** Overlapping deliveries of one (handler, key); null when not checked. */
  readonly overlaps?: number | null;
  readonly pending: number;
  readonly dead: number;
  readonly reasons: readonly string[];
}

/** Concatenate the records of several dispatcher processes. */
export function mergeRecords(parts: readonly Records[]): Records {
  const length = parts.reduce((sum, p) => sum + p.i.length, 0);
  const i = new Int32Array(length);
  const h = new Uint8Array(length);
  const t = new Float64Array(length);
  const e = new Float64Array(length);
  const recordedBy = new Uint8Array(length);
  let offset = 0;
  for (const [index, p] of parts.entries()) {
    i.set(p.i, offset);
    h.set(p.h, offset);
    t.set(p.t, offset);
    e.set(p.e ?? p.t, offset);
    recordedBy.fill(index, offset, offset + p.i.length);
    offset += p.i.length;
  }
  return { i, h, t, e, p: recordedBy };
}

/** Set comparison of (event, handler) pairs: lost, unexpected, duplicates. */
export function comparePairs(
  published: Int32Array,
  pairs: { readonly i: Int32Array; readonly h: Uint8Array },
): { lost: number; unexpected: number; duplicates: number } {
  const handlers = HANDLERS.length;
  let max = 0;
  for (const i of published) if (i > max) max = i;
  for (const i of pairs.i) if (i > max) max = i;
  const expected = new Uint8Array((max + 1) * handlers);
  for (const i of published) for (let h = 0; h < handlers; h += 1) expected[i * handlers + h] = 1;
  const seen = new Uint32Array((max + 1) * handlers);
  let unexpected = 0;
  for (let r = 0; r < pairs.i.length; r += 1) {
    const i = pairs.i[r]!;
    const h = pairs.h[r]!;
    if (i < 0 || h >= handlers) {
      unexpected += 1;
      continue;
    }
    seen[i * handlers + h]! += 1;
  }
  let lost = 0;
  let duplicates = 0;
  for (let p = 0; p < expected.length; p += 1) {
    const count = seen[p]!;
    if (expected[p] && count === 0) lost += 1;
    if (!expected[p] && count > 0) unexpected += 1;
    if (count > 1) duplicates += count - 1;
  }
  return { lost, unexpected, duplicates };
}

/** Order violations and overlaps per (handler, key), from the records. */
export function orderCheck(records: Records, keys: KeyMap): { orderViolations: number; overlaps: number } {
  const handlers = HANDLERS.length;
  const slot = new Float64Array(records.i.length);
  const index: number[] = [];
  for (let r = 0; r < records.i.length; r += 1) {
    const key = keyNumber(keys, records.i[r]!);
    if (key < 0) continue;
    slot[r] = key * handlers + records.h[r]!;
    index.push(r);
  }
  // Two records of one process: its record order is its start order.
  const recordedBy = records.p;
  const oneProcess = (a: number, b: number) => recordedBy !== undefined && recordedBy[a] === recordedBy[b];
  // By (handler, key), then start time, then (one process) record order or else event index DESCENDING: a tie between
  // processes reads as out of order.
  index.sort(
    (a, b) =>
      slot[a]! - slot[b]! ||
      records.t[a]! - records.t[b]! ||
      (oneProcess(a, b) ? a - b : records.i[b]! - records.i[a]!),
  );
  let orderViolations = 0;
  let overlaps = 0;
  for (let k = 1; k < index.length; k += 1) {
    const a = index[k - 1]!;
    const b = index[k]!;
    if (slot[a] !== slot[b]) continue;
    if (records.i[b]! <= records.i[a]! || (records.t[b] === records.t[a] && !oneProcess(a, b))) orderViolations += 1;
    if (records.t[b]! < records.e[a]!) overlaps += 1;
  }
  return { orderViolations, overlaps };
}

/**
 * @param published event indexes that were committed
 * @param keys the ordering keys of the events ({ kind: 'none' }: unkeyed run)
 * @param ordered whether the contender orders keyed events
 * @param markerOverlaps overlaps the dispatcher processes saw in-process
 */
export function validate(
  published: Int32Array,
  records: Records,
  keys: KeyMap,
  ordered: boolean,
  remaining: Remaining,
  markerOverlaps = 0,
): Exactness {
  const { lost, unexpected, duplicates } = comparePairs(published, records);
  const checked = ordered && keys.kind !== 'none';
  let orderViolations: number | null = null;
  let overlaps: number | null = null;
  if (checked) {
    const found = orderCheck(records, keys);
    orderViolations = found.orderViolations;
    overlaps = found.overlaps + markerOverlaps;
  }
  const reasons: string[] = [];
  if (lost) reasons.push(`${lost} lost`);
  if (unexpected) reasons.push(`${unexpected} unexpected`);
  if (duplicates) reasons.push(`${duplicates} duplicates`);
  if (orderViolations) reasons.push(`${orderViolations} order violations`);
  if (overlaps) reasons.push(`${overlaps} overlapping deliveries of one (handler, key)`);
  if (remaining.pending) reasons.push(`${remaining.pending} still pending`);
  if (remaining.dead) reasons.push(`${remaining.dead} dead`);
  return {
    valid: reasons.length === 0,
    expected: published.length * HANDLERS.length,
    handled: records.i.length,
    lost,
    unexpected,
    duplicates,
    orderViolations,
    overlaps,
    pending: remaining.pending,
    dead: remaining.dead,
    reasons,
  };
}
